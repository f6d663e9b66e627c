package cma

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestRead: a read of this process's memory copies it; a read of a
// process that is gone, or of an address the target has not mapped,
// fails with the errno the kernel gave.
func TestRead(t *testing.T) {
	src := []byte(strings.Repeat("gocoll cma ", 1000))
	dst := make([]byte, len(src)-3)
	if err := Read(os.Getpid(), uintptr(unsafe.Pointer(&src[3])), dst); err != nil || string(dst) != string(src[3:]) {
		t.Fatalf("read of this process: %v, equal %v", err, string(dst) == string(src[3:]))
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		pid  int
		addr uintptr
		want error
	}{
		{"gone", gone.Process.Pid, uintptr(unsafe.Pointer(&src[0])), unix.ESRCH},
		{"unmapped", os.Getpid(), 4096, unix.EFAULT},
	}
	for _, tc := range cases {
		if err := Read(tc.pid, tc.addr, dst); !errors.Is(err, tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line wrapping %v", tc.name, err, tc.want)
		}
	}
}

// TestAllowFor: only Yama's scope 1 calls for PR_SET_PTRACER_ANY, and a
// failed prctl is reported; the other scopes say what they mean.
func TestAllowFor(t *testing.T) {
	cases := []struct {
		scope   string
		prctl   error
		calls   int
		why     string
		wantErr bool
	}{
		{"0", nil, 0, "ptrace_scope 0", false},
		{"1", nil, 1, "PR_SET_PTRACER_ANY set", false},
		{"1", unix.EINVAL, 1, "", true},
		{"2", nil, 0, "only CAP_SYS_PTRACE", false},
		{"3", nil, 0, "no process may read another", false},
	}
	for _, tc := range cases {
		calls := 0
		why, err := allowFor(tc.scope, func() error { calls++; return tc.prctl })
		if calls != tc.calls || !strings.Contains(why, tc.why) || (err != nil) != tc.wantErr || tc.wantErr && !errors.Is(err, unix.EINVAL) {
			t.Errorf("scope %s: %q, %v after %d prctl calls", tc.scope, why, err, calls)
		}
	}
}

// BenchmarkRead: process_vm_readv of this process's memory against the
// built-in copy, at the single copy's piece (64 KiB) and at a block of
// a 4 MiB allreduce on 4 ranks (1 MiB).
func BenchmarkRead(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		src, dst := make([]byte, size), make([]byte, size)
		b.Run("readv/"+strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := Read(os.Getpid(), uintptr(unsafe.Pointer(&src[0])), dst); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("copy/"+strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// The test binary doubles as the peer BenchmarkHop reads: with
// GOCOLL_CMA_CHILD set it fills a buffer of hopMax bytes with hopByte,
// prints the buffer's address and waits for its standard input to close.
func TestMain(m *testing.M) {
	if os.Getenv("GOCOLL_CMA_CHILD") != "" {
		src := make([]byte, hopMax)
		for i := range src {
			src[i] = hopByte(i)
		}
		fmt.Println(uintptr(unsafe.Pointer(&src[0])))
		io.Copy(io.Discard, os.Stdin)
		runtime.KeepAlive(src)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const hopMax = 4 << 20

func hopByte(i int) byte { return byte(i * 7) }

// hopPeer starts the child TestMain describes and says where its buffer
// is; the child ends with the benchmark.
func hopPeer(b *testing.B) (pid int, addr uintptr) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOCOLL_CMA_CHILD=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close(); cmd.Wait() })
	if _, err := fmt.Fscan(out, &addr); err != nil {
		b.Fatal(err)
	}
	return cmd.Process.Pid, addr
}

// BenchmarkHop: one plain hop of a message through the shm transport's
// ring (the sender copies each 256 KiB segment into one of 8 slots, the
// receiver copies it out into its buffer, here both on one core) against
// the single copy a rendezvous over cross-memory attach would make
// instead (the receiver reads each segment of another process's buffer
// straight into its own), at the sizes where a 2-rank allreduce over shm
// trails Open MPI's (whose vader BTL does the latter). Every buffer is
// touched first, so no run pays page faults the other does not; the
// bytes read are checked. Per byte moved, not per copy: a hop.
func BenchmarkHop(b *testing.B) {
	const seg, slots = 256 << 10, 8
	pid, addr := hopPeer(b)
	ring := make([]byte, slots*seg)
	for i := range ring {
		ring[i] = byte(i)
	}
	for _, size := range []int{256 << 10, 1 << 20, hopMax} {
		src, dst := make([]byte, size), make([]byte, size)
		for i := range src {
			src[i] = hopByte(i)
		}
		b.Run("ring/"+strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			k := 0
			for b.Loop() {
				for off := 0; off < size; off += seg {
					s := ring[k%slots*seg : (k%slots+1)*seg]
					k++
					copy(s, src[off:off+seg])
					copy(dst[off:off+seg], s)
				}
			}
		})
		clear(dst)
		b.Run("readv/"+strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				for off := 0; off < size; off += seg {
					if err := Read(pid, addr+uintptr(off), dst[off:off+seg]); err != nil {
						b.Fatal(err)
					}
				}
			}
			if !bytes.Equal(dst, src) {
				b.Fatalf("read %d bytes of process %d that differ from what it wrote", size, pid)
			}
		})
	}
}
