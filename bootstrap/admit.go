package bootstrap

import (
	"bufio"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/gocoll/gocoll/internal/auth"
	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/peercred"
)

// A store without a token admits each connection itself before serving
// it: its first request is an admit, carrying a munge credential under
// Slurm (see munge.go) and nothing elsewhere. The store admits
//
//   - a process of its own user on its own host (the uid of the caller's
//     socket, checked before the handshake; see internal/peercred),
//     whatever it sent: a credential from this host is read with the
//     admit and not decoded, since the uid has said more than it could,
//     and each unmunge is a process of its own;
//   - under Slurm, a rank of another host that sent a munge credential of
//     the store's uid bound to this connection;
//   - with GOCOLL_INSECURE=1 (or a store a program serves itself with
//     Serve), anyone;
//
// and answers the admitted with the job's secret, sealed under the
// connection's session key: 256 random bits the store draws once, which
// the ranks then use as the token of every link (LinkToken), so that the
// links of a job without a token are authenticated as a tokened job's are.
// A rank it does not admit gets one line saying why and what to set.
//
// The rank, in turn, takes the secret only from a store it can place
// (untrustedStore otherwise): before a byte, one on its own host must
// listen as its own user (the owner of the store's end of the
// connection), and then the rank sends no credential, as the store admits
// it by uid; under Slurm, one of another host must send, with the
// secret, a munge credential of the rank's uid bound to this connection
// and labelled as the store's (byStore), so that neither a credential of
// another connection nor the rank's own reflected back will do. The
// store sends its credential to a rank of another host that sent one. A store of
// another host without munge (torchrun's, Open MPI's with
// GOCOLL_INSECURE=1), and any store with GOCOLL_INSECURE=1, is taken on
// trust.

// admitMode is whom a store without a token admits from other hosts.
type admitMode int

const (
	admitAny   admitMode = iota // everyone: GOCOLL_INSECURE, or a store served by hand
	admitLocal                  // nobody: torchrun's, Open MPI's
	admitMunge                  // ranks with a munge credential: Slurm's
)

// secretLen is the size of a job's secret, in bytes; sealedLen that of
// the secret sealed (a GCM nonce, the ciphertext, its tag).
const (
	secretLen = 32
	sealedLen = 12 + secretLen + 16
)

// notAdmitted is a store's refusal to admit a connection. It matches
// ErrJoinRefused and auth.ErrDenied.
type notAdmitted struct{ why string }

func (e *notAdmitted) Error() string { return "the rendezvous did not admit this rank: " + e.why }

func (e *notAdmitted) Is(target error) bool {
	return target == ErrJoinRefused || target == auth.ErrDenied
}

// admit reads a connection's first request, which must be an admit, and
// decides; it answers the admitted with the sealed job secret and, to a
// rank of another host that sent a munge credential, a munge credential
// of the store's own bound to the connection (byStore), by which the
// rank knows that the store is of its job's user (a rank of this host
// knows it by the uid of the store's socket). The connection is c, its
// session key session.
func (s *Server) admit(c net.Conn, r *bufio.Reader, session [auth.KeyLen]byte) error {
	op, _, cred, err := readRequest(r)
	if err != nil {
		return err
	}
	if op != opAdmit {
		return fmt.Errorf("%s before admit: %w", opName(op), ErrBadFrame)
	}
	s.mu.Lock()
	mode, job, socket := s.admits, s.job, s.mungeSocket
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.handshakeTimeout)
	defer cancel()
	by, why := s.admission(ctx, c, mode, socket, session, job, string(cred))
	if why != "" {
		writeFrame(c, statusDenied, []byte(why), nil)
		return &notAdmitted{why}
	}
	s.sayAdmitted(c, by)
	answer := sealSecret(session, s.secret[:])
	if len(cred) > 0 && by != byUID {
		// Without munged here the answer has no credential, and a rank
		// of another host says so as it refuses this store.
		if own, err := mungeEncode(ctx, socket, mungeBinding(byStore, session, job)); err == nil {
			answer = append(answer, own...)
		} else {
			logging.L().Warn("rendezvous: cannot prove this store to the ranks of other hosts", "err", err)
		}
	}
	return writeFrame(c, statusOK, answer, nil)
}

// byUID is how admission says it admitted a process of this host.
const byUID = "uid"

// admission says how c is admitted (byUID, "munge", "GOCOLL_INSECURE"),
// or why not. A connection from this host is admitted by its uid before
// any credential it sent is looked at.
func (s *Server) admission(ctx context.Context, c net.Conn, mode admitMode, socket string, session [auth.KeyLen]byte, job, cred string) (by, why string) {
	uid, err := peercred.Lookup(c)
	if err != nil {
		return "", "cannot tell where it connects from: " + err.Error()
	}
	if uid != peercred.Remote {
		return byUID, "" // its uid was checked before the handshake
	}
	if mode == admitMunge && cred != "" {
		if why := mungeCheck(ctx, socket, cred, mungeBinding(byRank, session, job)); why != "" {
			return "", why
		}
		return "munge", ""
	}
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	switch mode {
	case admitAny:
		return "no check (GOCOLL_INSECURE)", ""
	case admitMunge:
		return "", "this job has no GRUN_TOKEN and a rank connects from another host (" + host + ") without a munge credential: " +
			"start munged on every node (Slurm's AuthType=auth/munge runs it), or set the same random GRUN_TOKEN for every rank " +
			"(export GRUN_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n') in the job script), or GOCOLL_INSECURE=1 on a trusted network"
	}
	return "", "this job has no GRUN_TOKEN and a rank connects from another host (" + host + "): " +
		"set the same random GRUN_TOKEN for every rank (GRUN_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n'), passed on with mpirun -x GRUN_TOKEN or in torchrun's environment), " +
		"or GOCOLL_INSECURE=1 on a trusted network"
}

// sayAdmitted logs, once per host and way, that ranks of a host are
// admitted that way (GOCOLL_DEBUG=info).
func (s *Server) sayAdmitted(c net.Conn, by string) {
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	s.mu.Lock()
	said := s.admitted[host+" "+by]
	s.admitted[host+" "+by] = true
	s.mu.Unlock()
	if !said {
		logging.L().Info("rendezvous: admitting ranks without a job token", "from", host, "by", by)
	}
}

// admitClient asks the store of a job without a token to admit this
// connection, with a munge credential bound to it if cfg.Munge and the
// store is not one of this host that admits it by uid (storeLocal, which
// with cfg.Insecure was not looked at), and returns the job's secret the
// store sends back. A store of another host proves itself the same way
// under munge: a rank that sent a credential takes the secret only from a
// store whose own credential, of this uid, names this connection.
func (c *Client) admitClient(ctx context.Context, cfg Config, session [auth.KeyLen]byte, storeLocal bool) ([]byte, error) {
	var cred string
	var mungeErr error
	if cfg.Munge && (cfg.Insecure || !storeLocal) {
		cred, mungeErr = mungeEncode(ctx, cfg.MungeSocket, mungeBinding(byRank, session, cfg.Job))
	}
	answer, err := c.do(ctx, opAdmit, "", []byte(cred))
	var na *notAdmitted
	if errors.As(err, &na) {
		if mungeErr != nil {
			return nil, &notAdmitted{na.why + " (here: " + mungeErr.Error() + ")"}
		}
		return nil, na
	}
	if err != nil {
		return nil, err
	}
	sealed, storeCred := answer[:min(len(answer), sealedLen)], answer[min(len(answer), sealedLen):]
	if cfg.Munge && !cfg.Insecure && !storeLocal {
		why := ""
		switch {
		case mungeErr != nil:
			why = "this rank cannot check it without munge (" + mungeErr.Error() + ")"
		case len(storeCred) == 0:
			why = "it sent no munge credential of its own (is munged running on its host?)"
		default:
			why = mungeCheck(ctx, cfg.MungeSocket, string(storeCred), mungeBinding(byStore, session, cfg.Job))
		}
		if why != "" {
			return nil, &untrustedStore{"it is on another host and did not prove it runs as this job's user: " + why}
		}
	}
	return openSecret(session, sealed)
}

// untrustedStore is a rank's refusal of a store that cannot show it is
// its job's: a process of another user holds the port, or a store of
// another host did not prove itself with munge. It matches
// ErrJoinRefused and auth.ErrDenied.
type untrustedStore struct{ why string }

func (e *untrustedStore) Error() string {
	return "this rank does not trust it: " + e.why + "; without GRUN_TOKEN a rank takes the job's secret only from a store of its own user"
}

func (e *untrustedStore) Is(target error) bool {
	return target == ErrJoinRefused || target == auth.ErrDenied
}

// checkStoreOwner refuses (untrustedStore) a store on this host whose
// listening socket, the peer of c, belongs to another user: the accepted
// end of a connection has its listener's owner, in /proc/net/tcp. It
// reports whether the store is on this host.
func checkStoreOwner(c net.Conn) (local bool, err error) {
	uid, err := peercred.Lookup(c)
	if err != nil {
		return false, &untrustedStore{"cannot tell which user serves it: " + err.Error()}
	}
	if uid == peercred.Remote {
		return false, nil
	}
	if uid != os.Geteuid() {
		return true, &untrustedStore{fmt.Sprintf("its port is held by a process of uid %d, this job runs as uid %d", uid, os.Geteuid())}
	}
	return true, nil
}

// secretKey is the key the job's secret is sealed under on a connection.
func secretKey(session [auth.KeyLen]byte) cipher.AEAD {
	m := hmac.New(sha256.New, session[:])
	m.Write([]byte("gocoll job secret"))
	block, _ := aes.NewCipher(m.Sum(nil)) // 32 bytes: cannot fail
	aead, _ := cipher.NewGCM(block)       // a standard block size: cannot fail
	return aead
}

// sealSecret encrypts secret for the connection whose session key is
// session: a random nonce, then the AES-256-GCM ciphertext.
func sealSecret(session [auth.KeyLen]byte, secret []byte) []byte {
	aead := secretKey(session)
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(secret)+aead.Overhead())
	rand.Read(nonce) // never fails (crypto/rand, Go 1.24 on)
	return aead.Seal(nonce, nonce, secret, nil)
}

// openSecret is sealSecret's inverse.
func openSecret(session [auth.KeyLen]byte, sealed []byte) ([]byte, error) {
	aead := secretKey(session)
	if len(sealed) != sealedLen {
		return nil, fmt.Errorf("bootstrap: the job secret came in %d bytes: %w", len(sealed), ErrBadFrame)
	}
	secret, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], nil)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: the job secret does not open under this connection's key: %w", auth.ErrDenied)
	}
	return secret, nil
}

// newSecret draws a job's secret.
func newSecret() (b [secretLen]byte) {
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24 on)
	return b
}
