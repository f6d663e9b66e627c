// Package logging holds the library's one logger, configured once from
// GOCOLL_DEBUG: quiet by default (warnings and errors only), "info" explains
// the choices made (transport, peers, algorithms), "debug" adds per-step
// detail. Like NCCL_DEBUG, it writes to stderr.
package logging

import (
	"log/slog"
	"os"
	"sync"

	"github.com/gocoll/gocoll/internal/settings"
)

var (
	once   sync.Once
	logger *slog.Logger
)

// L returns the library logger, reading GOCOLL_DEBUG (internal/settings)
// on first use. A value it cannot read leaves the default, warnings: comm's
// Init refuses it, naming it, so the typo does not hide behind silence.
func L() *slog.Logger {
	once.Do(func() {
		lv, _ := settings.Debug(os.LookupEnv)
		logger = newAt(lv)
	})
	return logger
}

// New builds a logger for the given GOCOLL_DEBUG value (grun's -debug);
// one it cannot read means the default.
func New(level string) *slog.Logger {
	lv, _ := settings.ParseDebug(level)
	return newAt(lv)
}

func newAt(lv slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})).With("lib", "gocoll")
}
