// Command sandboxkit-runner is the static in-container runner of sandboxkit's Docker backend:
// PID 1 of a container, speaking the same framed protocol over stdin/stdout as _runner.py.
//
// Why a static binary: it needs nothing from the image (no Python, no libc, no shell), so any
// image runs, down to one holding only a static busybox. The host bind-mounts it read-only at
// /.sandboxkit-runner and starts it as the container's command.
//
// Why PID 1, root with few capabilities, non-dumpable, every signal ignored: see _runner.py;
// the same reasoning holds here. Go adds one twist: its runtime installs handlers for most
// signals, and a handled signal is delivered even to init. The runner replaces them all (see
// ignoreAllSignals), so it catches no signal and a program cannot stop, crash or interrupt it.
//
// Why a second stage: a Go process cannot run code between fork and exec, but a program must
// start with its limits, nice value, OOM score, session and user set. So each program is
// started as "runner -stage2 ...": a fresh process (already the program's user, with no
// capability) reads the step's private part (argv, env, cwd) from a pipe, applies the limits,
// and execs the program. The runner never decodes that private part: it copies the bytes from
// the request buffer into the pipe, and zeroes the buffer after the reply.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

var (
	workdir   = "/work"
	sandboxID = 1000
	// supervisor: root with only the capabilities it needs, touching files as the program's user.
	supervisor = false
	self       = "/.sandboxkit-runner"
	scratch    = make([]byte, 65536)
	buffers    [][]byte
	oomSeen    = -1
	scrubDirs  = []string{"/tmp", "/dev/shm", "/dev/mqueue"}
	hasBash    = false
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-stage2" {
		stage2(os.Args[2:])
		return
	}
	if os.Getpid() != 1 { // kill(-1) and wiping the workspace are only safe in a container of our own
		fmt.Fprintln(os.Stderr, "sandboxkit runner: refusing to run outside a container (it must be PID 1)")
		os.Exit(1)
	}
	if len(os.Args) > 1 {
		workdir = os.Args[1]
	}
	if len(os.Args) > 2 {
		if id, err := strconv.Atoi(os.Args[2]); err == nil {
			sandboxID = id
		}
	}
	if exe, err := os.Executable(); err == nil {
		self = exe
	}
	ignoreAllSignals()
	prctl(prSetDumpable, 0) // no ptrace, no /proc/1/mem or /proc/1/fd for the program
	if os.Getuid() == 0 {
		supervisor = supervise()
	}
	if err := syscall.Chdir(workdir); err != nil {
		fmt.Fprintf(os.Stderr, "sandboxkit runner: cannot enter %s: %v\n", workdir, err)
		os.Exit(1)
	}
	_, bashErr := resolve("bash", os.Getenv("PATH"), "/")
	hasBash = bashErr == nil
	oomSeen = oomKills()
	send(map[string]any{"hello": 1, "runner": "static", "uid": os.Getuid(), "pidfd": true, "bash": hasBash}, nil)
	for {
		header, blobs, ok := receive()
		if !ok {
			killAll(0)
			os.Exit(0) // the host hung up: the container is removed with us
		}
		reply, views := safeHandle(header, blobs)
		reply["id"] = header["id"]
		send(reply, views)
		for _, v := range views { // forget this request's inputs and outputs
			zero(v)
		}
		zero(blobs)
		for _, b := range scratch {
			if b != 0 {
				zero(scratch)
				break
			}
		}
	}
}

// ignoreAllSignals sets every signal to "ignore" with no handler, so none sent from inside the
// container reaches init (see the package comment). Set with rt_sigaction directly, replacing the
// Go runtime's handlers: a handled signal would be delivered. The exceptions are at their default:
// SIGCHLD ("ignore" would make the kernel reap our children, hiding how they ended) and the
// synchronous faults (a real fault must end the runner, not loop). A default action is never
// taken for init by a signal sent from its own namespace. Signal 33 keeps the runtime's handler:
// AllThreadsSyscall (setfsuid, setresuid on every thread) is built on it. Only root can send it
// to the runner, and the handler does nothing unless such a call is under way.
func ignoreAllSignals() {
	for sig := 1; sig <= 64; sig++ {
		switch syscall.Signal(sig) {
		case syscall.SIGKILL, syscall.SIGSTOP, sigPerThreadSyscall:
		case syscall.SIGCHLD, syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGSYS:
			setSignal(sig, sigDfl)
		default:
			setSignal(sig, sigIgn)
		}
	}
}

// supervise: started as root, stay root but touch files as the program's user (see _runner.py's
// supervise for why). True if that holds; otherwise become the program's user for good.
func supervise() bool {
	setFsIDs(sandboxID, sandboxID)
	if currentFsuid() == sandboxID {
		return true
	}
	syscall.Setgroups(nil)
	syscall.Setresgid(sandboxID, sandboxID, sandboxID)
	syscall.Setresuid(sandboxID, sandboxID, sandboxID)
	return false
}

// buffer is a reusable output buffer of at least size bytes (grown, never shrunk).
func buffer(slot, size int) []byte {
	for len(buffers) <= slot {
		buffers = append(buffers, nil)
	}
	if len(buffers[slot]) < size {
		buffers[slot] = make([]byte, size)
	}
	return buffers[slot]
}

func safeHandle(header map[string]any, blobs []byte) (reply map[string]any, views [][]byte) {
	defer func() {
		if r := recover(); r != nil {
			reply, views = map[string]any{"ok": false, "error": fmt.Sprintf("runner error: %v", r)}, nil
		}
	}()
	return handle(header, blobs)
}

func handle(header map[string]any, blobs []byte) (map[string]any, [][]byte) {
	switch header["op"] {
	case "ping":
		return map[string]any{"ok": true}, nil
	case "reset":
		return reset(), nil
	case "read":
		return readFiles(stringList(header["paths"]))
	case "links":
		if err := makeLinks(blobs); err != nil {
			return map[string]any{"ok": false, "error": err.Error()}, nil
		}
		return map[string]any{"ok": true}, nil
	case "holes":
		punchHoles(header["runs"], blobs)
		return map[string]any{"ok": true}, nil
	case "run":
		if err := writeFiles(header["write"], blobs); err != nil {
			return map[string]any{"ok": false, "error": err.Error()}, nil
		}
		steps, _ := header["steps"].([]any)
		results := []any{}
		var views [][]byte
		for index, raw := range steps {
			step, _ := raw.(map[string]any)
			result, outs := runStep(step, blobs, 2*index)
			results = append(results, result)
			views = append(views, outs...)
			if result["missing"] != nil || result["error"] != nil || (truthy(step["gate"]) && result["exit"] != 0) {
				break
			}
		}
		return map[string]any{"ok": true, "steps": results}, views
	}
	return map[string]any{"ok": false, "error": fmt.Sprintf("unknown op %v", header["op"])}, nil
}

// ----------------------------------------------------------------------------- JSON helpers

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

func integer(v any) int { return int(num(v)) }

func truthy(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case float64:
		return x != 0
	case nil:
		return false
	}
	return true
}

func stringList(v any) []string {
	items, _ := v.([]any)
	out := make([]string, 0, len(items))
	for _, item := range items {
		s, _ := item.(string)
		out = append(out, s)
	}
	return out
}

// span is a [offset, size] pair addressing the blob area; empty when absent or out of range.
func span(v any, blobs []byte) []byte {
	pair, _ := v.([]any)
	if len(pair) != 2 {
		return nil
	}
	off, size := integer(pair[0]), integer(pair[1])
	if off < 0 || size < 0 || off+size > len(blobs) {
		return nil
	}
	return blobs[off : off+size]
}
