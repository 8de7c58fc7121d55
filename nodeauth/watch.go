package nodeauth

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// PollEvery is how often Watch looks at the key file for a change.
const PollEvery = time.Second

// Load returns an Auth holding the keys of the file at path.
func Load(path string) (*Auth, error) {
	ks, err := LoadKeys(path)
	if err != nil {
		return nil, err
	}
	return New(ks, nil), nil
}

// Watch reloads the key file at path into a on SIGHUP and whenever its
// contents change, until ctx ends. A file that does not parse is logged and
// the keys held stay in force.
func Watch(ctx context.Context, path string, a *Auth, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	tick := time.NewTicker(PollEvery)
	defer tick.Stop()
	last, _ := os.ReadFile(path)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-tick.C:
		}
		b, err := os.ReadFile(path)
		if err != nil {
			log.Warn("cluster key file", "path", path, "err", err)
			continue
		}
		if bytes.Equal(b, last) {
			continue
		}
		last = b // a broken file is reported once, not every poll
		ks, err := ParseKeys(b)
		if err != nil {
			log.Warn("cluster key file not reloaded", "path", path, "err", err)
			continue
		}
		a.SetKeys(ks)
		log.Info("cluster key file reloaded", "path", path, "seal", ks.Seal.ID)
	}
}
