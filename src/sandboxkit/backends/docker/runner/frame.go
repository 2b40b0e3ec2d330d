package main

// Framing, both directions: a big-endian (json_len uint32, blob_len uint32), a UTF-8 JSON
// header, then the blob area. Bulky or private data travels only in blobs, which are sent
// straight from (and received into) buffers that are zeroed after each reply.

import (
	"encoding/binary"
	"encoding/json"
	"syscall"
	"unsafe"
)

// readFull fills buf from fd; false on EOF or error (the host went away).
func readFull(fd int, buf []byte) bool {
	got := 0
	for got < len(buf) {
		n, err := syscall.Read(fd, buf[got:])
		if err == syscall.EINTR || err == syscall.EAGAIN {
			continue
		}
		if err != nil || n <= 0 {
			return false
		}
		got += n
	}
	return true
}

// receive reads one request frame: its parsed header and its blob area.
func receive() (map[string]any, []byte, bool) {
	var head [8]byte
	if !readFull(0, head[:]) {
		return nil, nil, false
	}
	jsonLen := binary.BigEndian.Uint32(head[:4])
	blobLen := binary.BigEndian.Uint32(head[4:])
	header := make([]byte, jsonLen)
	blobs := make([]byte, blobLen)
	if !readFull(0, header) || !readFull(0, blobs) {
		return nil, nil, false
	}
	var parsed map[string]any
	err := json.Unmarshal(header, &parsed)
	zero(header)
	if err != nil {
		return map[string]any{}, blobs, true
	}
	return parsed, blobs, true
}

// send writes one frame whose blob area is views, in order, with writev (no copy of the views).
func send(header map[string]any, views [][]byte) {
	data, err := json.Marshal(header)
	if err != nil {
		data = []byte(`{"ok":false,"error":"unencodable reply"}`)
	}
	total := 0
	for _, v := range views {
		total += len(v)
	}
	var head [8]byte
	binary.BigEndian.PutUint32(head[:4], uint32(len(data)))
	binary.BigEndian.PutUint32(head[4:], uint32(total))
	parts := [][]byte{head[:], data}
	for _, v := range views {
		if len(v) > 0 {
			parts = append(parts, v)
		}
	}
	writeAll(1, parts)
}

// writeAll writes every part to fd with writev, resuming after short writes.
func writeAll(fd int, parts [][]byte) {
	for len(parts) > 0 {
		n := len(parts)
		if n > 1024 {
			n = 1024 // IOV_MAX
		}
		iov := make([]syscall.Iovec, n)
		for i := 0; i < n; i++ {
			iov[i].Base = &parts[i][0]
			iov[i].SetLen(len(parts[i]))
		}
		w, _, errno := syscall.Syscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
		if errno == syscall.EINTR || errno == syscall.EAGAIN {
			if errno == syscall.EAGAIN {
				waitFd(fd, pollOut, -1)
			}
			continue
		}
		if errno != 0 {
			return // the host is gone; the next receive sees EOF
		}
		written := int(w)
		for len(parts) > 0 && written >= len(parts[0]) {
			written -= len(parts[0])
			parts = parts[1:]
		}
		if len(parts) > 0 && written > 0 {
			parts[0] = parts[0][written:]
		}
	}
}

func zero(b []byte) {
	for i := range b {
		b[i] = 0
	}
}
