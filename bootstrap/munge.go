package bootstrap

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/gocoll/gocoll/internal/auth"
	"github.com/gocoll/gocoll/internal/safetext"
)

// Under Slurm a job without a token proves its ranks of other hosts to
// the store with munge (the store's own host's it admits by uid, see
// admit.go), the credential service Slurm itself authenticates with (munged
// runs on every node of a cluster whose AuthType is auth/munge, all
// sharing one key). A rank asks its munged (the munge command) for a
// credential whose payload binds it to one store connection: a hash of
// that connection's session key (auth.HandshakeKey) and the job's
// identity. The store has its own munged decode it (unmunge), which
// checks the credential's MAC, its time to live and that it was not
// decoded before (munged's replay cache), and says which uid made it;
// the store then checks that uid is its own and that the payload is this
// connection's. A credential copied onto another connection carries the
// wrong session key's hash, and one decoded already is a replay.

// maxMungeCred bounds the credential a client may send: a credential
// of a 64-byte payload is about 200 bytes of base64.
const maxMungeCred = 4096

// errNoMunge wraps a failure to create a credential (munge not installed,
// munged not running).
var errNoMunge = errors.New("no munge credential")

// Who made a credential: a rank proving itself to the store, or the
// store to a rank. Each side checks for the other's label, so a store
// that reflects a rank's own credential back does not prove itself.
const (
	byRank  = "rank"
	byStore = "store"
)

// mungeBinding is the payload of a connection's credential: the hash, in
// hex, of who made it (byRank, byStore), the connection's session key
// and the job's identity.
func mungeBinding(by string, session [auth.KeyLen]byte, job string) string {
	h := sha256.New()
	h.Write([]byte("gocoll store munge binding\x00" + by + "\x00"))
	h.Write(session[:])
	h.Write([]byte(job))
	return hex.EncodeToString(h.Sum(nil))
}

// mungeCheck decodes cred with munged and says why it is not a
// credential of this process's uid with payload want, or "".
func mungeCheck(ctx context.Context, socket, cred, want string) string {
	uid, payload, err := mungeDecode(ctx, socket, cred)
	switch {
	case err != nil:
		return "its munge credential was refused: " + err.Error()
	case uid != os.Geteuid():
		return fmt.Sprintf("its munge credential is of uid %d, this job runs as uid %d", uid, os.Geteuid())
	case !hmac.Equal([]byte(payload), []byte(want)):
		return "its munge credential was made for another connection or job, or by the other side (replayed, relayed or reflected)"
	}
	return ""
}

// mungeArgs starts a munge or unmunge command line: socket, if set.
func mungeArgs(socket string, args ...string) []string {
	if socket != "" {
		return append([]string{"-S", socket}, args...)
	}
	return args
}

// mungeEncode asks munged (at socket; "" is munge's default) for a
// credential carrying payload, decodable only by this process's uid.
func mungeEncode(ctx context.Context, socket, payload string) (string, error) {
	cmd := exec.CommandContext(ctx, "munge", mungeArgs(socket, "-s", payload, "-u", strconv.Itoa(os.Geteuid()))...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("munge: %s: %w", mungeSaid(err, stderr.Bytes()), errNoMunge)
	}
	cred := strings.TrimSpace(out.String())
	if !strings.HasPrefix(cred, "MUNGE:") || len(cred) > maxMungeCred {
		return "", fmt.Errorf("munge printed %d bytes that are not a credential: %w", len(cred), errNoMunge)
	}
	return cred, nil
}

// mungeDecode has munged (at socket) check cred and returns the uid that
// made it and its payload. A credential munged refuses (forged, expired,
// replayed, not for this uid) or a munged that does not answer is an
// error saying what unmunge said.
func mungeDecode(ctx context.Context, socket, cred string) (uid int, payload string, err error) {
	cmd := exec.CommandContext(ctx, "unmunge", mungeArgs(socket, "-k", "status uid")...)
	cmd.Stdin = strings.NewReader(cred)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	runErr := cmd.Run()
	// The selected metadata ("STATUS: Replayed credential (17)", "UID:
	// root (0)"), a blank line, the payload.
	meta, payload, _ := strings.Cut(out.String(), "\n\n")
	status, uidText := "", ""
	for _, line := range strings.Split(meta, "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch strings.TrimSpace(k) {
		case "STATUS":
			status = strings.TrimSpace(v)
		case "UID":
			uidText = strings.TrimSpace(v)
		}
	}
	if runErr != nil {
		if stderr.Len() == 0 && status != "" {
			stderr.WriteString(status)
		}
		return 0, "", fmt.Errorf("unmunge: %s", mungeSaid(runErr, stderr.Bytes()))
	}
	// The number in the last parentheses: "root (0)".
	if i := strings.LastIndexByte(uidText, '('); i >= 0 {
		uidText = strings.TrimSuffix(uidText[i+1:], ")")
	}
	if uid, err = strconv.Atoi(uidText); err != nil {
		return 0, "", fmt.Errorf("unmunge printed no uid")
	}
	return uid, payload, nil
}

// mungeSaid is a munge command's failure in one line: its message
// ("Replayed credential", "Failed to access ... (Did you start munged?)")
// and exit status.
func mungeSaid(err error, stderr []byte) string {
	msg := strings.TrimSpace(string(stderr))
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	if _, m, ok := strings.Cut(msg, "Error: "); ok {
		msg = m // "munge: Error: ...", "unmunge: Error: ..."
	}
	if msg == "" {
		return err.Error()
	}
	return safetext.Printable([]byte(msg)) + " (" + err.Error() + ")"
}
