package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

const (
	childNice = 10 // below the runner: a fork bomb cannot starve it past the deadline it enforces
	privateFd = 3
	reportFd  = 4
)

// stage2 runs in a fresh process as the program's user: fds 0-2 are the program's pipes, fd 3
// carries the step's private part (JSON: argv, env, cwd), fd 4 is the report pipe (closed by
// exec: "M" = command not found, "X reason" = could not start it). args: cpu, fsize, nofile.
func stage2(args []string) {
	argv0 := "?"
	fail := func(format string, a ...any) {
		syscall.Write(reportFd, []byte(fmt.Sprintf("X cannot start %q: ", argv0)+fmt.Sprintf(format, a...)))
		os.Exit(127)
	}
	raw := readAllFd(privateFd)
	syscall.Close(privateFd)
	argv, env, cwd, err := parsePrivate(raw)
	zero(raw)
	if err != nil || len(argv) == 0 {
		fail("bad request: %v", err)
	}
	argv0 = argv[0]
	syscall.CloseOnExec(reportFd)
	if fd, err := syscall.Open("/proc/self/oom_score_adj", syscall.O_WRONLY|syscall.O_CLOEXEC, 0); err == nil {
		syscall.Write(fd, []byte("1000")) // the OOM killer takes the program, never the runner
		syscall.Close(fd)
	}
	// Every thread of this process (the only one in its new process group): nice is per thread.
	syscall.Setpriority(syscall.PRIO_PGRP, 0, childNice)
	limits := [3]int{}
	for i := range limits {
		if i < len(args) {
			limits[i], _ = strconv.Atoi(args[i])
		}
	}
	cpu, fsize, nofile := uint64(limits[0]), uint64(limits[1]), uint64(limits[2])
	if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: cpu, Max: cpu + 1}); err != nil {
		fail("RLIMIT_CPU: %v", err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{}); err != nil {
		fail("RLIMIT_CORE: %v", err)
	}
	if fsize > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: fsize, Max: fsize}); err != nil {
			fail("RLIMIT_FSIZE: %v", err)
		}
	}
	if nofile > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: nofile, Max: nofile}); err != nil {
			fail("RLIMIT_NOFILE: %v", err)
		}
	}
	if err := syscall.Chdir(cwd); err != nil {
		fail("%v", err)
	}
	path := ""
	for _, kv := range env {
		if len(kv) > 5 && kv[:5] == "PATH=" {
			path = kv[5:]
		}
	}
	exe, err := resolve(argv0, path, cwd)
	if err != nil {
		syscall.Write(reportFd, []byte("M"))
		os.Exit(127)
	}
	defaultSignals()
	err = syscall.Exec(exe, argv, env)
	// What a shell says: the program's own failure, not the runner's.
	syscall.Write(2, []byte(fmt.Sprintf("%s: %s\n", argv0, errText(err))))
	if err == syscall.EACCES || err == syscall.ENOEXEC || err == syscall.EISDIR {
		os.Exit(126)
	}
	os.Exit(127)
}

func errText(err error) string {
	if errno, ok := err.(syscall.Errno); ok {
		s := errno.Error()
		if len(s) > 0 {
			return string(bytes.ToUpper([]byte(s[:1]))) + s[1:]
		}
	}
	return fmt.Sprint(err)
}

func readAllFd(fd int) []byte {
	var out []byte
	buf := make([]byte, 65536)
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			zero(buf)
			return out
		}
		out = append(out, buf[:n]...)
	}
}

// parsePrivate decodes {"argv": [...], "env": {...}, "cwd": "..."}, keeping env in its order.
func parsePrivate(raw []byte) ([]string, []string, string, error) {
	var parts struct {
		Argv []string        `json:"argv"`
		Env  json.RawMessage `json:"env"`
		Cwd  string          `json:"cwd"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, nil, "", err
	}
	var env []string
	dec := json.NewDecoder(bytes.NewReader(parts.Env))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, "", fmt.Errorf("env is not an object")
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, nil, "", err
		}
		var value string
		if err := dec.Decode(&value); err != nil {
			return nil, nil, "", err
		}
		env = append(env, fmt.Sprint(key)+"="+value)
	}
	return parts.Argv, env, parts.Cwd, nil
}
