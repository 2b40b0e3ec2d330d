package main

// Raw Linux system calls the syscall package does not wrap (or wraps per thread only).

import (
	"syscall"
	"unsafe"
)

const (
	prSetDumpable = 4
	sysPidfdOpen  = 434 // the same number on every architecture
	ipcRmid       = 0
	pollIn        = 0x1
	pollOut       = 0x4
	pollErr       = 0x8
	pollHup       = 0x10
	pollNval      = 0x20
)

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

// poll waits for events on fds; timeoutMs < 0 waits without end. EINTR counts as no event.
func poll(fds []pollFd, timeoutMs int) int {
	var ts *syscall.Timespec
	if timeoutMs >= 0 {
		t := syscall.NsecToTimespec(int64(timeoutMs) * 1e6)
		ts = &t
	}
	n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
		uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	if errno != 0 {
		return 0
	}
	return int(n)
}

func waitFd(fd int, events int16, timeoutMs int) {
	fds := []pollFd{{fd: int32(fd), events: events}}
	poll(fds, timeoutMs)
}

// readv reads into the views in order; returns bytes read (0 at EOF) or an errno.
func readv(fd int, views [][]byte) (int, syscall.Errno) {
	iov := make([]syscall.Iovec, 0, len(views))
	for _, v := range views {
		if len(v) > 0 {
			var io syscall.Iovec
			io.Base = &v[0]
			io.SetLen(len(v))
			iov = append(iov, io)
		}
	}
	if len(iov) == 0 {
		return 0, 0
	}
	n, _, errno := syscall.Syscall(syscall.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	return int(n), errno
}

func pidfdOpen(pid int) int {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno != 0 {
		return -1
	}
	return int(fd)
}

func prctl(option, arg uintptr) {
	syscall.RawSyscall6(syscall.SYS_PRCTL, option, arg, 0, 0, 0, 0)
}

// setFsIDs sets the filesystem uid and gid of every thread (they are per-thread attributes).
func setFsIDs(uid, gid int) {
	syscall.AllThreadsSyscall(syscall.SYS_SETFSGID, uintptr(gid), 0, 0)
	syscall.AllThreadsSyscall(syscall.SYS_SETFSUID, uintptr(uid), 0, 0)
}

// currentFsuid asks setfsuid with an invalid id: that changes nothing and returns the current one.
func currentFsuid() int {
	r, _, _ := syscall.RawSyscall(syscall.SYS_SETFSUID, ^uintptr(0), 0, 0)
	return int(r)
}

func ipcCtl(kind string, id int) {
	switch kind {
	case "shm":
		syscall.Syscall(syscall.SYS_SHMCTL, uintptr(id), ipcRmid, 0)
	case "msg":
		syscall.Syscall(syscall.SYS_MSGCTL, uintptr(id), ipcRmid, 0)
	case "sem":
		syscall.Syscall6(syscall.SYS_SEMCTL, uintptr(id), 0, ipcRmid, 0, 0, 0)
	}
}

// kernelSigaction is the kernel's struct sigaction (x86-64 and arm64 share this layout).
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const (
	sigDfl = 0
	sigIgn = 1
	// sigPerThreadSyscall is the Go runtime's signal for AllThreadsSyscall (_SIGRTMIN + 1).
	sigPerThreadSyscall = syscall.Signal(33)
)

// setSignal sets one signal's disposition (sigDfl or sigIgn) without going through the runtime.
func setSignal(sig int, handler uintptr) {
	act := kernelSigaction{handler: handler}
	syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
}

// defaultSignals puts every signal back to its default action and unblocks all, right before
// exec: dispositions the runner set to "ignore" would otherwise survive exec into the program.
func defaultSignals() {
	for sig := 1; sig <= 64; sig++ {
		if sig != int(syscall.SIGKILL) && sig != int(syscall.SIGSTOP) {
			setSignal(sig, sigDfl)
		}
	}
	var empty uint64
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, uintptr(unsafe.Pointer(&empty)), 0, 8, 0, 0)
}
