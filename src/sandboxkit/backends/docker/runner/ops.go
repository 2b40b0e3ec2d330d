package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const (
	inlineFileMax = 1 << 20 // files fetched through the channel up to this size each...
	inlineCallMax = 4 << 20 // ...and this much per call; larger ones the host copies with get_archive
)

// writeFiles writes [rel, offset, size, mode] entries from the blob area into the workspace.
func writeFiles(raw any, blobs []byte) error {
	entries, _ := raw.([]any)
	for _, item := range entries {
		entry, _ := item.([]any)
		if len(entry) != 4 {
			return fmt.Errorf("bad write entry")
		}
		rel, _ := entry[0].(string)
		data := span([]any{entry[1], entry[2]}, blobs)
		path := filepath.Join(workdir, rel)
		if filepath.Dir(path) != workdir {
			if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
				return err
			}
		}
		if err := syscall.Unlink(path); err != nil && err != syscall.ENOENT {
			return fmt.Errorf("unlink %s: %w", rel, err)
		}
		fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, uint32(integer(entry[3])))
		if err != nil {
			return fmt.Errorf("create %s: %w", rel, err)
		}
		for len(data) > 0 {
			n, err := syscall.Write(fd, data)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				syscall.Close(fd)
				return fmt.Errorf("write %s: %w", rel, err)
			}
			data = data[n:]
		}
		syscall.Close(fd)
	}
	return nil
}

// makeLinks makes the symlinks a checkpoint carried as data ("path NUL target NUL" pairs, paths
// relative): the engine's unpack refuses a relative link whose target climbs out of the workspace,
// so the host keeps those out of the archive and sends them here after it. A directory the
// program made read-only is opened for the moment it takes.
func makeLinks(blobs []byte) error {
	fields := bytes.Split(blobs, []byte{0})
	for i := 0; i+2 < len(fields); i += 2 {
		path := filepath.Join(workdir, string(fields[i]))
		target := string(fields[i+1])
		if err := syscall.Unlink(path); err != nil && err != syscall.ENOENT {
			return fmt.Errorf("unlink %s: %w", path, err)
		}
		err := syscall.Symlink(target, path)
		if err == syscall.EACCES {
			var st syscall.Stat_t
			parent := filepath.Dir(path)
			if err = syscall.Lstat(parent, &st); err == nil {
				mode := st.Mode & 0o7777
				if err = syscall.Chmod(parent, mode|0o300); err == nil {
					err = syscall.Symlink(target, path)
					if back := syscall.Chmod(parent, mode); err == nil {
						err = back
					}
				}
			}
		}
		if err != nil {
			return fmt.Errorf("symlink %s: %w", path, err)
		}
	}
	return nil
}

// punchHoles punches each file's runs of zeros ("path NUL" in the blobs, [offset, length, ...]
// each in runs) back out: the engine unpacks a checkpoint dense, and this gives the fork's tmpfs
// (and memory) back what the parent's sparse files never used. The content is the same either
// way, so a file that cannot be opened for writing (made read-only) simply stays dense.
func punchHoles(raw any, blobs []byte) {
	const keepSize, punchHole = 1, 2
	runs, _ := raw.([]any)
	paths := bytes.Split(blobs, []byte{0})
	for i, item := range runs {
		if i >= len(paths) {
			return
		}
		spans, _ := item.([]any)
		fd, err := syscall.Open(filepath.Join(workdir, string(paths[i])), syscall.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		for j := 0; j+1 < len(spans); j += 2 {
			_ = syscall.Fallocate(fd, keepSize|punchHole, int64(num(spans[j])), int64(num(spans[j+1])))
		}
		syscall.Close(fd)
	}
}

// wipe removes everything under top (not top itself), even what the program made read-only.
func wipe(top string) error {
	dir, err := os.Open(top)
	if err != nil {
		return err
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		path := filepath.Join(top, name)
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			return err
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			if err := syscall.Chmod(path, 0o700); err != nil {
				return err
			}
			if err := wipe(path); err != nil {
				return err
			}
			if err := syscall.Rmdir(path); err != nil {
				return err
			}
		} else if err := syscall.Unlink(path); err != nil {
			return err
		}
	}
	return nil
}

// ipcIDs lists the SysV IPC objects of kind (shm, msg, sem) in this IPC namespace.
func ipcIDs(kind string) []int {
	fh, err := os.Open("/proc/sysvipc/" + kind)
	if err != nil {
		return nil
	}
	defer fh.Close()
	var ids []int
	scanner := bufio.NewScanner(fh)
	first := true
	for scanner.Scan() {
		if first {
			first = false
			continue
		}
		fields := strings.Fields(scanner.Text())
		if len(fields) > 1 {
			if id, err := strconv.Atoi(fields[1]); err == nil {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// removeIPC removes every SysV shared memory segment, message queue and semaphore set and
// returns what is left (see _runner.py: they outlive their processes and stay charged to the
// container's memory). IPC_RMID wants the owner's euid: take it while nothing runs.
func removeIPC() []string {
	if supervisor {
		syscall.Setresuid(-1, sandboxID, -1)
		defer func() {
			syscall.Setresuid(-1, 0, -1)
			setFsIDs(sandboxID, sandboxID) // a change of euid resets the fsuid
		}()
	}
	var left []string
	for _, kind := range []string{"shm", "msg", "sem"} {
		for _, id := range ipcIDs(kind) {
			ipcCtl(kind, id)
		}
		for _, id := range ipcIDs(kind) {
			left = append(left, fmt.Sprintf("%s %d", kind, id))
		}
	}
	return left
}

// reset gives the next run what a fresh container gives; anything that cannot be removed makes
// the reply an error, and the host then discards the container instead of reusing it.
func reset() map[string]any {
	if leftovers() {
		killAll(0)
	}
	if err := syscall.Chmod(workdir, 0o700); err != nil {
		return map[string]any{"ok": false, "error": "chmod workspace: " + err.Error()}
	}
	if err := wipe(workdir); err != nil {
		return map[string]any{"ok": false, "error": "wipe workspace: " + err.Error()}
	}
	for _, top := range scrubDirs {
		if st, err := os.Stat(top); err == nil && st.IsDir() {
			if err := wipe(top); err != nil {
				return map[string]any{"ok": false, "error": "wipe " + top + ": " + err.Error()}
			}
		}
	}
	if left := removeIPC(); len(left) > 0 {
		return map[string]any{"ok": false, "error": "IPC objects survived the reset: " + strings.Join(left, ", ")}
	}
	return map[string]any{"ok": true}
}

// openInWorkspace opens the regular file rel under the workspace read-only, as the program's
// user, one component at a time with O_NOFOLLOW (a planted symlink is never followed), and
// O_NONBLOCK (a FIFO cannot stall us). -1 when absent or not allowed.
func openInWorkspace(rel string) int {
	parts := strings.Split(rel, "/")
	fd, err := syscall.Open(workdir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	for _, part := range parts[:len(parts)-1] {
		inner, err := syscall.Openat(fd, part, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		syscall.Close(fd)
		if err != nil {
			return -1
		}
		fd = inner
	}
	leaf, err := syscall.Openat(fd, parts[len(parts)-1],
		syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	syscall.Close(fd)
	if err != nil {
		return -1
	}
	var st syscall.Stat_t
	if syscall.Fstat(leaf, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(leaf)
		return -1
	}
	return leaf
}

// readFiles: per path [0, 0] absent, [1, size] its bytes follow, [2, size] too large to send here.
func readFiles(paths []string) (map[string]any, [][]byte) {
	states := []any{}
	var views [][]byte
	budget := inlineCallMax
	for _, rel := range paths {
		fd := openInWorkspace(rel)
		if fd < 0 {
			states = append(states, []int{0, 0})
			continue
		}
		var st syscall.Stat_t
		syscall.Fstat(fd, &st)
		size := int(st.Size)
		if size > min(inlineFileMax, budget) {
			states = append(states, []int{2, size})
			syscall.Close(fd)
			continue
		}
		data := make([]byte, size)
		got := 0
		for got < size {
			n, err := syscall.Read(fd, data[got:])
			if err == syscall.EINTR {
				continue
			}
			if err != nil || n <= 0 {
				break
			}
			got += n
		}
		syscall.Close(fd)
		states = append(states, []int{1, got})
		views = append(views, data[:got])
		budget -= got
	}
	return map[string]any{"ok": true, "files": states}, views
}
