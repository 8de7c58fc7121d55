// Package netnsrun runs a function inside a named network namespace, for
// tests and tools that make sockets or capture handles there: what f
// creates stays in the namespace after it returns.
package netnsrun

import (
	"runtime"

	"github.com/vishvananda/netns"
)

// In runs f on an OS thread switched to namespace ns (a name under
// /var/run/netns).
func In(ns string, f func() error) error {
	target, err := netns.GetFromName(ns)
	if err != nil {
		return err
	}
	defer target.Close()
	return InHandle(target, f)
}

// InHandle runs f on an OS thread switched to the namespace target. The
// thread is retired, not unlocked, if it cannot be switched back, so that
// it never serves other goroutines in the wrong namespace.
func InHandle(target netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			errc <- err
			return
		}
		err = f()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
