package model

import (
	"math/rand/v2"
	"testing"

	"github.com/netdir/netdir/internal/udpbatch"
)

func pe(n int) udpbatch.Peer { return udpbatch.Peer{IP: [16]byte{127, 0, 0, 1}, Port: uint16(n)} }

func TestPendingPutTake(t *testing.T) {
	p := newPending(4)
	p.put(10, pe(1))
	p.put(11, pe(2))
	if to, ok := p.take(11); !ok || to != pe(2) {
		t.Fatalf("take 11 = %v %v, want client 2", to, ok)
	}
	if _, ok := p.take(11); ok {
		t.Fatal("take 11 twice succeeded")
	}
	// A retransmission keeps its place and takes the new address.
	p.put(10, pe(3))
	if p.live != 1 {
		t.Fatalf("live = %d after retransmission, want 1", p.live)
	}
	if to, ok := p.take(10); !ok || to != pe(3) {
		t.Fatalf("take 10 = %v %v, want client 3", to, ok)
	}
	if p.evicted != 0 || p.live != 0 {
		t.Fatalf("evicted=%d live=%d, want 0 0", p.evicted, p.live)
	}
}

func TestPendingOverwritesOldest(t *testing.T) {
	p := newPending(4)
	for id := uint64(1); id <= 6; id++ {
		p.put(id, pe(int(id)))
	}
	if p.evicted != 2 || p.live != 4 {
		t.Fatalf("evicted=%d live=%d, want 2 4", p.evicted, p.live)
	}
	for id := uint64(1); id <= 2; id++ {
		if _, ok := p.take(id); ok {
			t.Errorf("request %d survived although it was the oldest", id)
		}
	}
	for id := uint64(3); id <= 6; id++ {
		if to, ok := p.take(id); !ok || to != pe(int(id)) {
			t.Errorf("take %d = %v %v", id, to, ok)
		}
	}
	// A slot whose reply came is reused without counting an eviction.
	for id := uint64(7); id <= 10; id++ {
		p.put(id, pe(int(id)))
	}
	if p.evicted != 2 {
		t.Fatalf("evicted=%d after reusing answered slots, want 2", p.evicted)
	}
}

// TestPendingMatchesReference runs random puts and takes against a plain
// map plus arrival queue, with ids drawn from a small range so that probing
// chains, wrap-around and backward shifts all occur.
func TestPendingMatchesReference(t *testing.T) {
	const size = 16
	p := newPending(size)
	ref := map[uint64]udpbatch.Peer{}
	var order []uint64 // ids in ring order, with answered ones left in place
	answered := map[int]bool{}
	var evicted uint64
	rng := rand.New(rand.NewPCG(1, 2))
	for step := 0; step < 20000; step++ {
		id := rng.Uint64N(64)
		if rng.IntN(2) == 0 {
			to := pe(rng.IntN(1000))
			if _, ok := ref[id]; ok {
				ref[id] = to
				p.put(id, to)
				continue
			}
			// The reference ring: position len(order)%size is overwritten.
			pos := len(order)
			if pos >= size {
				old := pos - size
				if !answered[old] {
					evicted++
					delete(ref, order[old])
				}
			}
			order = append(order, id)
			ref[id] = to
			p.put(id, to)
		} else {
			want, wok := ref[id]
			got, ok := p.take(id)
			if ok != wok || got != want {
				t.Fatalf("step %d: take %d = %v %v, want %v %v", step, id, got, ok, want, wok)
			}
			if wok {
				delete(ref, id)
				for i := len(order) - 1; i >= 0; i-- {
					if order[i] == id && !answered[i] {
						answered[i] = true
						break
					}
				}
			}
		}
		if p.live != len(ref) || p.evicted != evicted {
			t.Fatalf("step %d: live=%d evicted=%d, want %d %d", step, p.live, p.evicted, len(ref), evicted)
		}
	}
	if evicted == 0 {
		t.Fatal("the random walk never overflowed the table")
	}
}
