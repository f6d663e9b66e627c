package bootstrap

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gocoll/gocoll/internal/auth"
	"github.com/gocoll/gocoll/internal/gate"
	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/peercred"
	"github.com/gocoll/gocoll/internal/safetext"
)

// Wire format of the store, after the auth handshake. Every frame is a
// little-endian uint32 length of what follows, then:
//
//	request:  op(1) keylen(2) key value
//	response: status(1) payload       (the value, or an error text)
//
// Besides put, get, scan (every entry under a prefix, without waiting)
// and create (a put that only the first writer of a key wins, answered
// with the value that won: what ranks that must decide one thing alike
// agree through), a client may say which rank it is (join), that it is
// leaving and why (leave; an empty reason is a normal end), and ask who has
// left the job abnormally (departures). At a store without a token, the
// first request of every connection is an admit (admit.go). The store
// records a joined client
// whose connection ends without a leave as dead: the kernel closes a
// killed process's connections, so the store sees a death at once, from a
// vantage point no data link has. A get waiting on a key fails as soon as
// any rank has departed, since that rank may be the one to put it.
//
// Lengths are checked against the limits below before anything is allocated.
const (
	opPut        = 1
	opGet        = 2
	opJoin       = 3 // key: the rank in decimal; value: size in decimal, tab, job identity
	opLeave      = 4 // value: why, empty for a normal end
	opDepartures = 5 // value: uint32 milliseconds to wait for a first departure
	opScan       = 6 // key: a prefix; answer: every entry under it, now, without waiting
	opCreate     = 7 // put only if the key is absent; answer: the value the key then holds
	opAdmit      = 8 // value: a munge credential or nothing; answer: the sealed job secret (admit.go)

	statusOK     = 0
	statusErr    = 1
	statusGone   = 2 // a get cut short by a departure; payload says whose
	statusNoJoin = 3 // a join refused: payload says why
	statusDenied = 4 // an admit refused: payload says why

	maxRank       = 1 << 24
	maxReason     = 1 << 10
	maxDepartWait = 10 * time.Second

	// MaxKey and MaxValue bound what one entry may hold: addresses, queue
	// pair numbers and host ids are tiny; nothing large goes through here.
	MaxKey   = 1 << 10
	MaxValue = 1 << 20
	maxFrame = 1 + 2 + MaxKey + MaxValue
)

// handshakeTimeout bounds a connection's authentication, so that a stranger
// that connects and says nothing is cut off. A Server takes its value when
// it starts; tests shorten it.
var handshakeTimeout = 10 * time.Second

// preAuthMax bounds the connections a Server authenticates at once (see
// internal/gate). A Server takes its value when it starts; tests shrink it.
var preAuthMax = gate.Max

var (
	// ErrStoreClosed reports that the store server went away.
	ErrStoreClosed = errors.New("rendezvous store closed")
	// ErrBadFrame reports a malformed or oversized store frame.
	ErrBadFrame = errors.New("malformed rendezvous frame")
	// ErrJoinRefused reports that the store turned a rank away: its rank
	// had joined already, it belongs to another job (two jobs that share
	// a rendezvous port and no GRUN_TOKEN reach one store), or, in a job
	// without a token, the store did not admit its connection or the
	// rank did not trust the store (DialJob).
	ErrJoinRefused = errors.New("rendezvous refused to join")
	// ErrRankGone reports that a rank left the job abnormally (died, or
	// gave up) while others still waited for it at the rendezvous.
	ErrRankGone = errors.New("a rank left the job")
)

// Departure is a rank that left the job abnormally, as the store saw it.
type Departure struct {
	Rank int
	Why  string // "die (...)", "killed by signal SIGKILL" (from grun), "give up: REASON"
}

func (d Departure) String() string { return fmt.Sprintf("rank %d %s", d.Rank, d.Why) }

// diedWhy is what the store records for a joined client whose connection
// ends without a leave.
const diedWhy = "die (its rendezvous connection closed without goodbye)"

// Server is the rendezvous store: a key/value map where Get waits until the
// key is Put. grun runs one per job; without grun, rank 0 runs it.
type Server struct {
	ln    net.Listener
	token []byte

	mu sync.Mutex
	kv map[string][]byte
	// waiting has a channel per key some get waits for, closed by the
	// key's put; departed is closed and replaced at each departure. A put
	// wakes only the gets waiting for its key: with one channel for every
	// change, each of n ranks' puts would wake every waiting get, n² wake-ups
	// per job, which at thousands of ranks is what the store spent its
	// time on.
	waiting  map[string]chan struct{}
	departed chan struct{}
	conns    map[net.Conn]struct{}
	departs  []Departure    // in the order seen
	joined   map[int]string // rank -> the address it joined from
	job      string         // the job every joining rank must belong to
	size     int            // its number of ranks; 0 until known
	jobSet   bool           // job and size are fixed (by Expect or a first join)
	closed   bool
	done     chan struct{}

	// Without a token: whom the store admits from other hosts (see
	// ServeFor), munged's socket for admitMunge, the job's secret it
	// hands the admitted, and the hosts and ways it said it admitted.
	admits      admitMode
	mungeSocket string
	secret      [secretLen]byte
	admitted    map[string]bool

	refused          atomic.Int64
	gate             *gate.Gate // connections not yet authenticated
	wg               sync.WaitGroup
	handshakeTimeout time.Duration
}

// Listen starts a store on addr ("host:port"; port 0 picks one) that admits
// only clients holding token, and serves it in the background until Close.
func Listen(addr string, token []byte) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: listen %s: %w", addr, err)
	}
	return Serve(ln, token), nil
}

// Serve serves a store on an existing listener, in the background.
func Serve(ln net.Listener, token []byte) *Server {
	s := &Server{
		ln:       ln,
		token:    append([]byte(nil), token...),
		kv:       make(map[string][]byte),
		waiting:  make(map[string]chan struct{}),
		departed: make(chan struct{}),
		conns:    make(map[net.Conn]struct{}),
		joined:   make(map[int]string),
		done:     make(chan struct{}),
		secret:   newSecret(),
		admitted: make(map[string]bool),

		handshakeTimeout: handshakeTimeout,
		gate:             gate.New("rendezvous", preAuthMax, gate.Every, logging.L()),
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

// Expect fixes the job this store serves: a rank whose join names another
// job identity or size is refused. Without Expect the first join fixes them
// (grun's store: grun's token already keeps other jobs out).
func (s *Server) Expect(job string, size int) {
	s.mu.Lock()
	s.job, s.size, s.jobSet = job, size, true
	s.mu.Unlock()
}

// join admits rank, from addr, with the job identity and size it claims, or
// says why not.
func (s *Server) join(rank, size int, job, addr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.jobSet {
		s.job, s.size, s.jobSet = job, size, true
	}
	switch {
	case job != s.job:
		return fmt.Errorf("rank %d is of another job (%s) than this store's (%s): two jobs share one rendezvous address; give each its own MASTER_PORT or GRUN_TOKEN",
			rank, orNone(job), orNone(s.job))
	case size != s.size:
		return fmt.Errorf("rank %d is of a job of %d ranks, this store's has %d: two jobs share one rendezvous address; give each its own MASTER_PORT or GRUN_TOKEN",
			rank, size, s.size)
	case rank >= size && s.kv[ElasticRunningKey] == nil:
		return fmt.Errorf("rank %d out of range for %d ranks", rank, size)
	}
	if from, ok := s.joined[rank]; ok {
		return fmt.Errorf("rank %d joined already, from %s: two jobs share one rendezvous address, or one rank was started twice; give each job its own MASTER_PORT or GRUN_TOKEN", rank, from)
	}
	s.joined[rank] = addr
	return nil
}

// ElasticRunningKey is where the ranks of an elastic job say, once
// their communicator is built, that the job runs: from then on the
// store admits ranks past the job's size, replacements that join it
// (comm's Grow), each under a job rank of its own.
const ElasticRunningKey = "elastic/running"

// ClosedEarlyPrefix is where a rank of the job's communicator that closed
// it while other ranks went on to a later call says so, under its rank
// in decimal, in one line: the cause of their failures, which the
// launcher's summary names (the rank itself may exit 0).
const ClosedEarlyPrefix = "closedearly/"

func orNone(job string) string {
	if job == "" {
		return "no job id"
	}
	return "job " + job
}

// Addr is the address clients dial.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Refused counts connections turned away: wrong token, wrong protocol,
// not admitted (a job without a token, see admit.go), or frames that
// broke the protocol.
func (s *Server) Refused() int { return int(s.refused.Load()) }

// Close stops the store and disconnects every client.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	s.gate.Close()
	return err
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	life, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-life.Done():
		}
	}()
	for {
		// At most gate.Max connections authenticate at once; the rest
		// wait in the backlog, costing no descriptor.
		if !s.gate.Acquire(life) {
			return
		}
		c, err := s.ln.Accept()
		if err != nil {
			s.gate.Release()
			select {
			case <-s.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient (EMFILE and the like): back off, keep serving.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			s.gate.Release()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	rank, left := -1, false
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		closed := s.closed
		s.mu.Unlock()
		c.Close()
		if rank >= 0 && !left && !closed {
			s.MarkGone(rank, diedWhy)
		}
	}()
	var err error
	if len(s.token) == 0 {
		// No token: on this host, only this user's processes.
		err = peercred.Check(c)
	}
	var session [auth.KeyLen]byte
	if err == nil {
		session, err = auth.HandshakeKey(c, s.token, auth.Store, false, time.Now().Add(s.handshakeTimeout))
	}
	r := bufio.NewReader(c)
	if err == nil && len(s.token) == 0 {
		// Still under the gate: an admission may ask munged.
		c.SetDeadline(time.Now().Add(s.handshakeTimeout))
		err = s.admit(c, r, session)
		c.SetDeadline(time.Time{})
	}
	s.gate.Release()
	if err != nil {
		s.refused.Add(1)
		s.gate.Refuse(c.RemoteAddr(), err)
		return
	}
	for {
		op, key, val, err := readRequest(r)
		if err != nil {
			// A client that proved the token and then broke the protocol
			// is refused; one whose connection merely ended (a rank that
			// died or gave up: its departure is recorded) is not a
			// stranger, and is not counted as one.
			if errors.Is(err, ErrBadFrame) {
				s.refused.Add(1)
				logging.L().Warn("rendezvous: dropped a client", "remote", c.RemoteAddr().String(), "err", err)
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				logging.L().Info("rendezvous: a client's connection ended mid-request", "remote", c.RemoteAddr().String(), "rank", rank, "err", err)
			}
			return
		}
		switch op {
		case opPut:
			s.put(key, val)
			err = writeFrame(c, statusOK, nil, nil)
		case opGet:
			v, gone, ok := s.wait(key)
			switch {
			case !ok:
				return
			case gone != nil:
				err = writeFrame(c, statusGone, []byte(gone.String()), nil)
			default:
				err = writeFrame(c, statusOK, v, nil)
			}
		case opJoin:
			r, _ := strconv.Atoi(key) // parseRequest checked both
			sz, job, _ := strings.Cut(string(val), "\t")
			n, _ := strconv.Atoi(sz)
			if jerr := s.join(r, n, job, c.RemoteAddr().String()); jerr != nil {
				s.refused.Add(1)
				logging.L().Warn("rendezvous: refused a join", "remote", c.RemoteAddr().String(), "err", jerr)
				writeFrame(c, statusNoJoin, []byte(jerr.Error()), nil)
				return
			}
			rank = r
			err = writeFrame(c, statusOK, nil, nil)
		case opLeave:
			left = true
			if len(val) > 0 && rank >= 0 {
				s.MarkGone(rank, "give up: "+string(val))
			}
			err = writeFrame(c, statusOK, nil, nil)
		case opDepartures:
			wait := time.Duration(binary.LittleEndian.Uint32(val)) * time.Millisecond
			err = writeFrame(c, statusOK, encodeDepartures(s.departures(min(wait, maxDepartWait))), nil)
		case opScan:
			err = writeFrame(c, statusOK, s.scan(key), nil)
		case opCreate:
			err = writeFrame(c, statusOK, s.create(key, val), nil)
		default:
			s.refused.Add(1)
			logging.L().Warn("rendezvous: unknown request", "remote", c.RemoteAddr().String(), "op", op)
			writeFrame(c, statusErr, []byte(fmt.Sprintf("unknown op %d", op)), nil)
			return
		}
		if err != nil {
			return
		}
	}
}

// scan encodes the entries whose key starts with prefix, as the answer to
// a scan: for each, the key's length (2 bytes), the key, the value's
// length (4 bytes), the value. Entries past MaxValue bytes in all are
// left out.
func (s *Server) scan(prefix string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []byte
	for k, v := range s.kv {
		if !strings.HasPrefix(k, prefix) || len(out)+6+len(k)+len(v) > MaxValue {
			continue
		}
		out = binary.LittleEndian.AppendUint16(out, uint16(len(k)))
		out = append(out, k...)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(v)))
		out = append(out, v...)
	}
	return out
}

// decodeScan reads a scan's answer.
func decodeScan(b []byte) (map[string][]byte, error) {
	m := make(map[string][]byte)
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, fmt.Errorf("scan answer: %w", ErrBadFrame)
		}
		kl := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+kl+4 {
			return nil, fmt.Errorf("scan answer: %w", ErrBadFrame)
		}
		k := string(b[2 : 2+kl])
		vl := int(binary.LittleEndian.Uint32(b[2+kl:]))
		b = b[2+kl+4:]
		if vl > len(b) {
			return nil, fmt.Errorf("scan answer: %w", ErrBadFrame)
		}
		m[k] = b[:vl:vl]
		b = b[vl:]
	}
	return m, nil
}

func (s *Server) put(key string, val []byte) {
	s.mu.Lock()
	s.kv[key] = val
	if ch, ok := s.waiting[key]; ok {
		close(ch)
		delete(s.waiting, key)
	}
	s.mu.Unlock()
}

// create stores val under key unless the key holds a value already, and
// returns the value the key holds then: the first writer's.
func (s *Server) create(key string, val []byte) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.kv[key]; ok {
		return v
	}
	s.kv[key] = val
	if ch, ok := s.waiting[key]; ok {
		close(ch)
		delete(s.waiting, key)
	}
	return val
}

// Value is what is stored under key, if anything: for the launcher
// that holds the store, without a connection.
func (s *Server) Value(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.kv[key]
	return v, ok
}

// Set stores value under key, as a client's Put does.
func (s *Server) Set(key string, value []byte) { s.put(key, append([]byte(nil), value...)) }

// Entries is every entry under prefix, as a client's Scan gives them.
func (s *Server) Entries(prefix string) map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string][]byte{}
	for k, v := range s.kv {
		if strings.HasPrefix(k, prefix) {
			m[k] = v
		}
	}
	return m
}

// MarkGone records that rank left the job abnormally, and why, and fails
// every get still waiting. Clients report their own departures; a launcher
// that reaps a rank (grun) reports it too, which covers a rank that died
// before it reached the store. Only a rank's first departure counts.
func (s *Server) MarkGone(rank int, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.departs {
		if d.Rank == rank {
			return
		}
	}
	s.departs = append(s.departs, Departure{Rank: rank, Why: safetext.Printable([]byte(why))})
	close(s.departed)
	s.departed = make(chan struct{})
}

// LeftWithoutGoodbye reports whether rank's connection ended without a
// leave: its process exited (or died) without closing its communicator.
func (s *Server) LeftWithoutGoodbye(rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.departs {
		if d.Rank == rank {
			return d.Why == diedWhy
		}
	}
	return false
}

// LeftFirst reports whether rank was the first to leave the job and left
// without a goodbye: the departure every other one followed.
func (s *Server) LeftFirst(rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.departs) > 0 && s.departs[0].Rank == rank && s.departs[0].Why == diedWhy
}

// wait blocks until key exists, a rank departs or the server closes. A
// client that hangs up while waiting is noticed when the server closes:
// waiters are few and the store lives only as long as its job.
func (s *Server) wait(key string) (v []byte, gone *Departure, ok bool) {
	for {
		s.mu.Lock()
		v, ok := s.kv[key]
		var d *Departure
		if len(s.departs) > 0 {
			d = &s.departs[0]
		}
		var ch, dep chan struct{}
		if !ok && d == nil {
			ch = s.waiting[key]
			if ch == nil {
				ch = make(chan struct{})
				s.waiting[key] = ch
			}
			dep = s.departed
		}
		s.mu.Unlock()
		if ok {
			return v, nil, true
		}
		if d != nil {
			return nil, d, true
		}
		select {
		case <-ch:
		case <-dep:
		case <-s.done:
			return nil, nil, false
		}
	}
}

// departures returns the departures so far, waiting up to wait for a first.
func (s *Server) departures(wait time.Duration) []Departure {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		d := slices.Clone(s.departs)
		ch := s.departed
		s.mu.Unlock()
		if len(d) > 0 {
			return d
		}
		select {
		case <-ch:
		case <-timer.C:
			return nil
		case <-s.done:
			return nil
		}
	}
}

// encodeDepartures writes one "rank\twhy" line per departure.
func encodeDepartures(ds []Departure) []byte {
	var b []byte
	for _, d := range ds {
		b = fmt.Appendf(b, "%d\t%s\n", d.Rank, d.Why)
	}
	return b
}

func decodeDepartures(b []byte) ([]Departure, error) {
	var ds []Departure
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		r, why, ok := strings.Cut(line, "\t")
		n, err := strconv.Atoi(r)
		if !ok || err != nil || n < 0 || n >= maxRank {
			return nil, fmt.Errorf("departure %q: %w", line, ErrBadFrame)
		}
		ds = append(ds, Departure{Rank: n, Why: why})
	}
	return ds, nil
}

// readRequest reads one request frame, validating every length before use.
func readRequest(r *bufio.Reader) (op byte, key string, val []byte, err error) {
	var hdr [4]byte
	if _, err = io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, "", nil, fmt.Errorf("truncated frame length: %w", ErrBadFrame)
		}
		return 0, "", nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n < 3 || n > maxFrame {
		return 0, "", nil, fmt.Errorf("frame length %d outside [3, %d]: %w", n, maxFrame, ErrBadFrame)
	}
	body := make([]byte, n)
	if _, err = io.ReadFull(r, body); err != nil {
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			// Reset mid-frame: a client that died, not one that lied
			// about its frame's length.
			return 0, "", nil, fmt.Errorf("connection lost mid-frame: %w", err)
		}
		return 0, "", nil, fmt.Errorf("truncated frame: %w", ErrBadFrame)
	}
	return parseRequest(body)
}

func parseRequest(body []byte) (op byte, key string, val []byte, err error) {
	if len(body) < 3 {
		return 0, "", nil, fmt.Errorf("request of %d bytes: %w", len(body), ErrBadFrame)
	}
	op = body[0]
	klen := int(binary.LittleEndian.Uint16(body[1:]))
	if klen > MaxKey || 3+klen > len(body) {
		return 0, "", nil, fmt.Errorf("key length %d does not fit a %d-byte request: %w", klen, len(body), ErrBadFrame)
	}
	key = string(body[3 : 3+klen])
	val = body[3+klen:]
	if len(val) > MaxValue {
		return 0, "", nil, fmt.Errorf("value of %d bytes over the %d limit: %w", len(val), MaxValue, ErrBadFrame)
	}
	switch op {
	case opGet, opScan:
		if len(val) != 0 {
			return 0, "", nil, fmt.Errorf("%s with a value: %w", opName(op), ErrBadFrame)
		}
	case opJoin:
		sz, _, _ := strings.Cut(string(val), "\t")
		n, err := strconv.Atoi(key)
		size, serr := strconv.Atoi(sz)
		if err != nil || n < 0 || n >= maxRank || serr != nil || size < 1 || size > maxRank || len(val) > maxReason {
			return 0, "", nil, fmt.Errorf("join as %q: want a rank in [0, %d) and a size, tab, job of at most %d bytes: %w", key, maxRank, maxReason, ErrBadFrame)
		}
	case opAdmit:
		if key != "" || len(val) > maxMungeCred {
			return 0, "", nil, fmt.Errorf("admit with a %d-byte key and a %d-byte credential (at most %d): %w", len(key), len(val), maxMungeCred, ErrBadFrame)
		}
	case opLeave:
		if key != "" || len(val) > maxReason {
			return 0, "", nil, fmt.Errorf("leave with a %d-byte key and a %d-byte reason (at most %d): %w", len(key), len(val), maxReason, ErrBadFrame)
		}
	case opDepartures:
		if key != "" || len(val) != 4 {
			return 0, "", nil, fmt.Errorf("departures request with a %d-byte key and a %d-byte value (want none and 4): %w", len(key), len(val), ErrBadFrame)
		}
	}
	return op, key, val, nil
}

// writeFrame writes length, first byte, then a and b.
func writeFrame(w io.Writer, first byte, a, b []byte) error {
	buf := make([]byte, 5, 5+len(a)+len(b))
	binary.LittleEndian.PutUint32(buf, uint32(1+len(a)+len(b)))
	buf[4] = first
	buf = append(append(buf, a...), b...)
	_, err := w.Write(buf)
	return err
}

// Client talks to a Server. Its methods are safe for concurrent use; requests
// are served one at a time.
type Client struct {
	turn   chan struct{} // held (a value in it) by the request in flight
	conn   net.Conn
	r      *bufio.Reader
	broken error
	// linkToken is what the job's links authenticate with: its token,
	// or without one the job's secret the store handed this client.
	linkToken []byte
}

// Dial connects to the store at addr and authenticates with token:
// DialJob with a Config of only Addr and Token.
func Dial(ctx context.Context, addr string, token []byte) (*Client, error) {
	return DialJob(ctx, Config{Addr: addr, Token: token})
}

// DialJob connects to the store of cfg's job, at cfg.Addr, as one of its
// ranks. It authenticates with cfg.Token; a job without one is admitted by
// the store (see docs/security.md), with a munge credential if cfg.Munge,
// and receives the job's secret for its links (LinkToken). A rank the
// store does not admit, or that does not trust the store (another user's
// on this host, or under munge one of another host that does not prove
// itself; not checked with cfg.Insecure), gets an error matching
// ErrJoinRefused and auth.ErrDenied that says why. The store may not be
// up yet (rank 0 serves it in some launch modes), so refused connections
// are retried until ctx ends.
func DialJob(ctx context.Context, cfg Config) (*Client, error) {
	addr := cfg.Addr
	var d net.Dialer
	backoff := 5 * time.Millisecond
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			// Without a token, before a word: on this host, only a store
			// of this user (GOCOLL_INSECURE=1: anyone).
			storeLocal := true
			if len(cfg.Token) == 0 && !cfg.Insecure {
				if storeLocal, err = checkStoreOwner(c); err != nil {
					c.Close()
					return nil, fmt.Errorf("bootstrap: rendezvous %s: %w", addr, err)
				}
			}
			deadline := time.Now().Add(handshakeTimeout)
			if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
				deadline = dl
			}
			session, err := auth.HandshakeKey(c, cfg.Token, auth.Store, true, deadline)
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("bootstrap: rendezvous %s: %w", addr, err)
			}
			cl := &Client{turn: make(chan struct{}, 1), conn: c, r: bufio.NewReader(c), linkToken: cfg.Token}
			if len(cfg.Token) == 0 {
				if cl.linkToken, err = cl.admitClient(ctx, cfg, session, storeLocal); err != nil {
					c.Close()
					return nil, fmt.Errorf("bootstrap: rendezvous %s: %w", addr, err)
				}
			}
			return cl, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bootstrap: rendezvous %s unreachable: %w (last error: %v)", addr, ctx.Err(), err)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ECONNRESET) {
			return nil, fmt.Errorf("bootstrap: rendezvous %s: %w", addr, err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, fmt.Errorf("bootstrap: rendezvous %s unreachable: %w (last error: %v)", addr, ctx.Err(), err)
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// LinkToken is the token the job's links authenticate with (the
// transports' Connect): the job's token, or for a job without one the
// secret its store handed this client, the same for every rank.
func (c *Client) LinkToken() []byte { return c.linkToken }

// LocalAddr is this end of the connection: the address of the interface
// that reaches the store, which is also the one peers can reach us on.
func (c *Client) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// Put stores value under key, replacing any earlier value.
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	_, err := c.do(ctx, opPut, key, value)
	return err
}

// Get returns key's value, waiting until some client has Put it.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	return c.do(ctx, opGet, key, nil)
}

// Scan returns every entry whose key starts with prefix, as the store
// holds them now: unlike Get, it never waits.
func (c *Client) Scan(ctx context.Context, prefix string) (map[string][]byte, error) {
	b, err := c.do(ctx, opScan, prefix, nil)
	if err != nil {
		return nil, err
	}
	return decodeScan(b)
}

// Create stores value under key if no client has stored anything there
// yet, and returns the value the key holds afterwards: value if this call
// won, else the first writer's. Ranks that each propose an outcome and
// must all act on the same one agree this way.
func (c *Client) Create(ctx context.Context, key string, value []byte) ([]byte, error) {
	return c.do(ctx, opCreate, key, value)
}

// Join tells the store which rank of which job this client is, so that
// the store can tell the others if the connection ends without a Leave. The
// store refuses (ErrJoinRefused) a rank that joined already, and a rank
// whose job identity (Config.Job) or size differs from its job's.
func (c *Client) Join(ctx context.Context, rank, size int, job string) error {
	if rank < 0 || rank >= maxRank || size < 1 || size > maxRank || len(job) > maxReason-16 {
		return fmt.Errorf("bootstrap: join as rank %d of %d, job %q: out of range: %w", rank, size, job, ErrBadFrame)
	}
	_, err := c.do(ctx, opJoin, strconv.Itoa(rank), []byte(strconv.Itoa(size)+"\t"+job))
	return err
}

// Leave tells the store this rank is leaving: in good order with an empty
// why, else abnormally, for that reason (which other ranks see).
func (c *Client) Leave(ctx context.Context, why string) error {
	if len(why) > maxReason {
		why = why[:maxReason-3] + "..."
	}
	_, err := c.do(ctx, opLeave, "", []byte(why))
	return err
}

// Departures lists the ranks that left the job abnormally, first first,
// waiting up to wait for a first one: a rank that noticed a lost peer asks
// here who really died.
func (c *Client) Departures(ctx context.Context, wait time.Duration) ([]Departure, error) {
	var ms [4]byte
	binary.LittleEndian.PutUint32(ms[:], uint32(min(wait, maxDepartWait)/time.Millisecond))
	b, err := c.do(ctx, opDepartures, "", ms[:])
	if err != nil {
		return nil, err
	}
	return decodeDepartures(b)
}

// Close disconnects from the store.
func (c *Client) Close() error { return c.conn.Close() }

// requests counts the requests this process's clients sent.
var requests atomic.Int64

// Requests is how many requests the clients of this process have sent
// to a store: the load this rank puts on the job's store (bench/scale
// reports it as a job's store traffic). See the package doc for why it
// is public.
func Requests() int64 { return requests.Load() }

func (c *Client) do(ctx context.Context, op byte, key string, value []byte) ([]byte, error) {
	requests.Add(1)
	if len(key) > MaxKey {
		return nil, fmt.Errorf("bootstrap: key of %d bytes over the %d limit: %w", len(key), MaxKey, ErrBadFrame)
	}
	if len(value) > MaxValue {
		return nil, fmt.Errorf("bootstrap: value of %d bytes over the %d limit: %w", len(value), MaxValue, ErrBadFrame)
	}
	if err := ctx.Err(); err != nil {
		// Nothing sent: the connection stays as it is.
		return nil, fmt.Errorf("bootstrap: %s %q: %w", opName(op), key, err)
	}
	// The connection is one request at a time: a request waits for its
	// turn as long as ctx lets it.
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("bootstrap: %s %q: %w", opName(op), key, ctx.Err())
	}
	if c.broken != nil {
		<-c.turn
		return nil, c.broken
	}
	var kh [3]byte
	kh[0] = op
	binary.LittleEndian.PutUint16(kh[1:], uint16(len(key)))
	buf := make([]byte, 4, 4+3+len(key)+len(value))
	binary.LittleEndian.PutUint32(buf, uint32(3+len(key)+len(value)))
	buf = append(append(append(buf, kh[:]...), key...), value...)
	if op != opGet && (op != opDepartures || binary.LittleEndian.Uint32(value) == 0) {
		// The store answers these at once (a departures request that
		// waits for none too: an elastic watchdog's). A caller whose ctx ends
		// first stops waiting, but the request goes on to its answer in
		// the background, so that the stream stays in step and the
		// connection usable: cutting it short would leave it broken for
		// good, and a rank whose leave then could not be said would be
		// taken for dead. A store that does not answer within
		// abandonedWait breaks the connection as before.
		type answer struct {
			resp []byte
			err  error
		}
		done := make(chan answer, 1)
		go func() {
			defer func() { <-c.turn }()
			c.conn.SetDeadline(time.Now().Add(abandonedWait))
			resp, err := c.roundTrip(buf)
			c.conn.SetDeadline(time.Time{})
			done <- answer{resp, c.settle(op, key, err, nil)}
		}()
		select {
		case a := <-done:
			return a.resp, a.err
		case <-ctx.Done():
			return nil, fmt.Errorf("bootstrap: %s %q: %w", opName(op), key, ctx.Err())
		}
	}
	defer func() { <-c.turn }()
	if ctx.Done() != nil {
		// Cancelling ctx interrupts a waiting get by expiring the
		// deadline. If that races with the request's completion, wait
		// for it and clear the deadline again, or it would fail the
		// next request.
		fired := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			c.conn.SetDeadline(time.Unix(1, 0))
			close(fired)
		})
		defer func() {
			if !stop() {
				<-fired
				c.conn.SetDeadline(time.Time{})
			}
		}()
	}
	resp, err := c.roundTrip(buf)
	if err = c.settle(op, key, err, ctx); err != nil {
		return nil, err
	}
	return resp, nil
}

// abandonedWait bounds how long a request whose caller stopped waiting
// may take before the connection is given up.
const abandonedWait = 30 * time.Second

// settle turns a round trip's error into do's, breaking the connection
// if the stream may be out of step. Called in turn.
func (c *Client) settle(op byte, key string, err error, ctx context.Context) error {
	var refused *refusal
	if errors.As(err, &refused) {
		// A whole answer, only not a value: the stream is in step.
		return fmt.Errorf("bootstrap: %s %q: %w", opName(op), key, refused.err)
	}
	if err != nil {
		if ctx != nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		// A request cut off half-way leaves the stream out of step.
		c.broken = fmt.Errorf("bootstrap: %s %q: %w", opName(op), key, err)
		c.conn.Close()
		return c.broken
	}
	return nil
}

func (c *Client) roundTrip(req []byte) ([]byte, error) {
	if _, err := c.conn.Write(req); err != nil {
		return nil, err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, ErrStoreClosed
		}
		return nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n < 1 || n > 1+MaxValue {
		return nil, fmt.Errorf("response length %d: %w", n, ErrBadFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return nil, fmt.Errorf("truncated response: %w", ErrBadFrame)
	}
	switch body[0] {
	case statusOK:
	case statusGone:
		return nil, &refusal{fmt.Errorf("%w: the rendezvous saw %s", ErrRankGone, safetext.Printable(body[1:]))}
	case statusNoJoin:
		return nil, &refusal{fmt.Errorf("%w: %s", ErrJoinRefused, safetext.Printable(body[1:]))}
	case statusDenied:
		return nil, &refusal{&notAdmitted{safetext.Printable(body[1:])}}
	default:
		return nil, fmt.Errorf("store refused: %s", safetext.Printable(body[1:]))
	}
	return body[1:], nil
}

// refusal is a well-formed answer that carries an error instead of a value.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }

func opName(op byte) string {
	switch op {
	case opPut:
		return "put"
	case opGet:
		return "get"
	case opJoin:
		return "join"
	case opLeave:
		return "leave"
	case opDepartures:
		return "departures"
	case opScan:
		return "scan"
	case opCreate:
		return "create"
	case opAdmit:
		return "admit"
	}
	return fmt.Sprintf("op %d", op)
}
