package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sink keeps one output stream: its first head bytes, its last tail bytes (a ring), and its
// length. Bytes go straight from the pipe into place with one readv into the head's free room
// and the ring's two halves. over turns true once more than stop bytes have arrived.
// live (1 stdout, 2 stderr, 0 off): each read is also sent to the host as a {"chunk": live}
// frame whose blob is the bytes just read, up to stop (streaming).
type sink struct {
	head, ring            []byte
	n, pos, filled, total int
	stop                  int
	over                  bool
	live                  int
}

func newSink(slot, head, tail, stop, live int) *sink {
	buf := buffer(slot, head+tail)
	return &sink{head: buf[:head], ring: buf[head : head+tail], stop: stop, live: live}
}

// read reads what is there; true at EOF (or on an error that ends the stream).
func (s *sink) read(fd int) bool {
	room := len(s.head) - s.n
	var iov [][]byte
	if room > 0 {
		iov = append(iov, s.head[s.n:])
	}
	if len(s.ring) > 0 {
		iov = append(iov, s.ring[s.pos:], s.ring[:s.pos])
	} else if room == 0 {
		iov = [][]byte{scratch} // no tail kept: count and drop
	}
	k, errno := readv(fd, iov)
	if errno == syscall.EAGAIN || errno == syscall.EINTR {
		return false
	}
	if errno != 0 {
		return true
	}
	if s.live != 0 && k > 0 && s.total < s.stop {
		left := k
		if s.stop-s.total < left {
			left = s.stop - s.total
		}
		var chunk [][]byte
		for _, part := range iov {
			if left == 0 {
				break
			}
			take := len(part)
			if take > left {
				take = left
			}
			if take > 0 {
				chunk = append(chunk, part[:take])
			}
			left -= take
		}
		send(map[string]any{"chunk": s.live}, chunk)
	}
	s.total += k
	intoHead := k
	if room < intoHead {
		intoHead = room
	}
	s.n += intoHead
	if len(s.ring) > 0 {
		rest := k - intoHead
		s.pos = (s.pos + rest) % len(s.ring)
		s.filled += rest
		if s.filled > len(s.ring) {
			s.filled = len(s.ring)
		}
	}
	s.over = s.over || s.total > s.stop
	return k == 0
}

// views: the kept bytes in stream order, head then the ring from its oldest byte.
func (s *sink) views() [][]byte {
	if s.filled < len(s.ring) {
		return [][]byte{s.head[:s.n], s.ring[:s.filled]}
	}
	return [][]byte{s.head[:s.n], s.ring[s.pos:], s.ring[:s.pos]}
}

func (s *sink) facts() []int { return []int{s.n, s.filled, s.total} }

// killAll SIGKILLs every process in the container but us and reaps them all; returns want's status.
func killAll(want int) *syscall.WaitStatus {
	var status *syscall.WaitStatus
	for {
		syscall.Kill(-1, syscall.SIGKILL) // init (us) is exempt
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return status
		}
		if pid == want && want > 0 {
			st := ws
			status = &st
		}
	}
}

// leftovers: whether any process besides us is left (orphans are re-parented to us first).
func leftovers() bool {
	var ws syscall.WaitStatus
	_, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
	return err != syscall.ECHILD
}

// oomKills is the memory cgroup's OOM-kill counter (v1 or v2), or -1 when it cannot be read.
func oomKills() int {
	for _, path := range []string{"/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"} {
		fh, err := os.Open(path)
		if err != nil {
			continue
		}
		scanner := bufio.NewScanner(fh)
		for scanner.Scan() {
			fields := strings.Fields(scanner.Text())
			if len(fields) == 2 && fields[0] == "oom_kill" {
				if v, err := strconv.Atoi(fields[1]); err == nil {
					fh.Close()
					return v
				}
			}
		}
		fh.Close()
	}
	return -1
}

// resolve finds exe as a shell would: a path with a slash as is (relative to cwd), else on PATH.
func resolve(exe, path, cwd string) (string, error) {
	if strings.Contains(exe, "/") {
		full := exe
		if !filepath.IsAbs(full) {
			full = filepath.Join(cwd, exe)
		}
		if _, err := os.Stat(full); err != nil {
			return "", err
		}
		return full, nil
	}
	for _, folder := range strings.Split(path, ":") {
		if folder == "" {
			folder = "."
		}
		full := filepath.Join(folder, exe)
		if !filepath.IsAbs(full) {
			full = filepath.Join(cwd, full)
		}
		if st, err := os.Stat(full); err == nil && st.Mode().IsRegular() && syscall.Access(full, 1) == nil {
			return full, nil
		}
	}
	return "", syscall.ENOENT
}

func pipe() (int, int, error) {
	var p [2]int
	err := syscall.Pipe2(p[:], syscall.O_CLOEXEC)
	return p[0], p[1], err
}

func closeAll(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
}

// runStep runs one program through stage 2 and collects what it did.
func runStep(step map[string]any, blobs []byte, slot int) (map[string]any, [][]byte) {
	stdin := span(step["stdin"], blobs)
	private := span(step["private"], blobs)
	var fds []int
	for i := 0; i < 5; i++ {
		r, w, err := pipe()
		if err != nil {
			closeAll(fds...)
			return map[string]any{"error": "cannot make a pipe: " + err.Error()}, nil
		}
		fds = append(fds, r, w)
	}
	inR, inW, outR, outW, errR, errW, privR, privW, reportR, reportW := fds[0], fds[1], fds[2], fds[3], fds[4], fds[5], fds[6], fds[7], fds[8], fds[9]
	attr := &syscall.ProcAttr{
		Dir:   "/",
		Env:   []string{"GOMAXPROCS=1", "GOTRACEBACK=none"}, // few threads (pids limit), no runtime dump
		Files: []uintptr{uintptr(inR), uintptr(outW), uintptr(errW), uintptr(privR), uintptr(reportW)},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	}
	if supervisor { // the program's user for good: no capability survives this
		attr.Sys.Credential = &syscall.Credential{Uid: uint32(sandboxID), Gid: uint32(sandboxID), Groups: []uint32{}}
	}
	args := []string{self, "-stage2", strconv.Itoa(integer(step["cpu"])), strconv.Itoa(integer(step["fsize"])),
		strconv.Itoa(integer(step["nofile"]))}
	started := time.Now()
	pid, err := syscall.ForkExec(self, args, attr)
	closeAll(inR, outW, errW, privR, reportW)
	if err != nil {
		closeAll(inW, outR, errR, privW, reportR)
		return map[string]any{"error": "cannot start the runner's second stage: " + err.Error()}, nil
	}
	// The private part goes from the request buffer into the pipe: never decoded here.
	writeAll(privW, [][]byte{private})
	syscall.Close(privW)

	head, tail, stop := integer(step["head"]), integer(step["tail"]), integer(step["stop"])
	live := truthy(step["live"])
	outLive, errLive := 0, 0
	if live {
		outLive, errLive = 1, 2
	}
	sinks := map[int]*sink{outR: newSink(slot, head, tail, stop, outLive), errR: newSink(slot+1, head, tail, stop, errLive)}
	pidfd := pidfdOpen(pid)
	for fd := range sinks {
		syscall.SetNonblock(fd, true)
	}
	if len(stdin) > 0 {
		syscall.SetNonblock(inW, true)
	} else {
		syscall.Close(inW)
		inW = -1
	}
	deadline := started.Add(time.Duration(num(step["timeout"]) * float64(time.Second)))
	var status *syscall.WaitStatus
	var ended time.Time
	timedOut, over := false, false
	written := 0
	open := map[int]bool{outR: true, errR: true}
	for status == nil && !over {
		remaining := time.Until(deadline)
		if remaining <= 0 {
			timedOut = true
			break
		}
		wait := remaining
		if pidfd < 0 && wait > 10*time.Millisecond {
			wait = 10 * time.Millisecond
		}
		ms := int(wait / time.Millisecond)
		if ms < 1 {
			ms = 1
		}
		pfds := []pollFd{{fd: 0, events: 0}} // only POLLHUP/POLLERR: the host hung up mid-run
		for fd := range open {
			pfds = append(pfds, pollFd{fd: int32(fd), events: pollIn})
		}
		if pidfd >= 0 {
			pfds = append(pfds, pollFd{fd: int32(pidfd), events: pollIn})
		}
		if inW >= 0 {
			pfds = append(pfds, pollFd{fd: int32(inW), events: pollOut})
		}
		poll(pfds, ms)
		exited := pidfd < 0
		for _, p := range pfds {
			if p.revents == 0 {
				continue
			}
			fd := int(p.fd)
			switch {
			case fd == 0:
				if p.revents&(pollHup|pollErr) != 0 {
					killAll(0)
					os.Exit(0)
				}
			case open[fd]:
				if sinks[fd].read(fd) {
					delete(open, fd)
				}
				over = over || sinks[fd].over
			case fd == inW:
				n, err := syscall.Write(inW, stdin[written:min(len(stdin), written+65536)])
				if err == nil {
					written += n
				} else if err != syscall.EAGAIN && err != syscall.EINTR {
					written = len(stdin) // the program closed its stdin (EPIPE): stop feeding it
				}
				if written >= len(stdin) {
					syscall.Close(inW)
					inW = -1
				}
			case fd == pidfd:
				exited = true
			}
		}
		if status == nil && exited {
			var ws syscall.WaitStatus
			if done, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); done == pid {
				status, ended = &ws, time.Now()
			}
		}
	}
	if ended.IsZero() {
		ended = time.Now()
	}
	if status == nil || leftovers() {
		killed := killAll(pid) // daemons, leftovers and (on timeout) the program itself
		if status == nil {
			status = killed
		}
	}
	for fd := range open { // every writer is dead now: drain what the pipes still hold
		syscall.SetNonblock(fd, false)
		for !sinks[fd].read(fd) {
		}
	}
	for _, s := range sinks {
		over = over || s.over
	}
	syscall.SetNonblock(reportR, true)
	report := make([]byte, 4096)
	rn, rerr := syscall.Read(reportR, report) // every process is gone: nothing holds its write end
	if rerr != nil || rn < 0 {
		rn = 0
	}
	report = report[:rn]
	closeAll(outR, errR, pidfd, inW, reportR)
	before := oomSeen
	oomSeen = oomKills() // nothing runs between steps: no OOM goes unseen
	if len(report) > 0 && report[0] == 'M' {
		return map[string]any{"missing": true}, nil
	}
	if len(report) > 0 && report[0] == 'X' {
		text := ""
		if len(report) > 2 {
			text = string(report[2:])
		}
		return map[string]any{"error": text}, nil
	}
	result := map[string]any{
		"exit": nil, "signal": nil, "timed_out": timedOut, "over": over, "oom": oomSeen > before && before >= 0,
		"out": sinks[outR].facts(), "err": sinks[errR].facts(), "duration": ended.Sub(started).Seconds(),
	}
	if status != nil && status.Exited() {
		result["exit"] = status.ExitStatus()
	}
	if status != nil && status.Signaled() {
		result["signal"] = int(status.Signal())
	}
	return result, append(sinks[outR].views(), sinks[errR].views()...)
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}
