// Package logging holds the library's one logger, configured once from
// GOCOLL_DEBUG: quiet by default (warnings and errors only), "info" explains
// the choices made (transport, peers, algorithms), "debug" adds per-step
// detail. Like NCCL_DEBUG, it writes to stderr.
package logging

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
)

var (
	once   sync.Once
	logger *slog.Logger
)

// L returns the library logger, reading GOCOLL_DEBUG on first use.
func L() *slog.Logger {
	once.Do(func() {
		logger = New(os.Getenv("GOCOLL_DEBUG"))
	})
	return logger
}

// Check reports a GOCOLL_DEBUG value New would not understand (New treats
// it as the default, which would hide the typo behind silence).
func Check(level string) error {
	switch strings.ToLower(strings.TrimSpace(level)) {
	case "", "warn", "info", "debug", "trace", "off", "none":
		return nil
	}
	return fmt.Errorf("GOCOLL_DEBUG=%q: unknown level (want info, debug, warn or off)", level)
}

// New builds a logger for the given GOCOLL_DEBUG value.
func New(level string) *slog.Logger {
	lv := slog.LevelWarn
	switch strings.ToLower(strings.TrimSpace(level)) {
	case "info":
		lv = slog.LevelInfo
	case "debug", "trace":
		lv = slog.LevelDebug
	case "off", "none":
		lv = slog.LevelError + 4
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})).With("lib", "gocoll")
}
