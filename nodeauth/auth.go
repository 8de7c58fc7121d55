package nodeauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netdir/netdir/wire"
)

// Trailer layout.
const (
	MACLen     = 16
	TrailerLen = 4 + 8 + MACLen
)

// Window is how many counters of one sender a receiver remembers: a node op
// overtaken by more than Window later ones from its sender is refused as a
// replay (its sender retransmits). A node's shards send batches of at most
// 32 packets, so reordering stays far below it.
const Window = 2048

// Verdict is the outcome of Open.
type Verdict uint8

const (
	OK            Verdict = iota
	BadMAC                // no trailer, an unknown key id, or a MAC that does not verify
	Replay                // a counter already accepted, or from before the receiver started
	OldKey                // sealed with a key that a reload retired
	UnknownSender         // the sender is not in the layout at the packet's source (the caller's check)
	numVerdicts
)

var verdictNames = [...]string{"ok", "bad-mac", "replay", "old-key", "unknown-sender"}

func (v Verdict) String() string { return verdictNames[v] }

// Drops counts the node ops refused, by verdict.
type Drops struct {
	BadMAC        uint64 `json:"bad_mac"`
	Replay        uint64 `json:"replay"`
	OldKey        uint64 `json:"old_key"`
	UnknownSender uint64 `json:"unknown_sender"`
}

// ring is one generation of keys: the one to seal with, those accepted, and
// those a reload retired (refused, but recognised, to count them).
type ring struct {
	seal    Key
	accept  []Key
	retired []Key
}

func (r *ring) find(id uint32) (k Key, retired, ok bool) {
	for _, k := range r.accept {
		if k.ID == id {
			return k, false, true
		}
	}
	for _, k := range r.retired {
		if k.ID == id {
			return k, true, true
		}
	}
	return Key{}, false, false
}

// maxRetired bounds the retired keys remembered.
const maxRetired = 4

// Auth seals the node ops a process sends and opens those it receives. It
// is safe for concurrent use; a goroutine that seals many packets takes a
// Sealer of its own.
type Auth struct {
	ring  atomic.Pointer[ring]
	last  atomic.Uint64 // the last counter sealed
	now   func() time.Time
	since uint64 // counters up to it were sealed before this Auth existed

	shared struct {
		sync.Mutex
		s Sealer
	}

	mu   sync.Mutex // guards the fields below: Open's state
	macs map[uint32]hash.Hash
	macR *ring // the ring macs were made for
	sum  [sha256.Size]byte
	wins map[windowKey]*window

	drops [numVerdicts]atomic.Uint64

	watchMu  sync.Mutex
	watchers []func()
}

// New returns an Auth holding keys. now is the clock (nil: time.Now); a
// receiver refuses counters sealed before New was called.
func New(keys Keys, now func() time.Time) *Auth {
	if now == nil {
		now = time.Now
	}
	a := &Auth{now: now, wins: make(map[windowKey]*window)}
	a.since = uint64(now().UnixNano())
	a.shared.s.a = a
	a.SetKeys(keys)
	return a
}

// SetKeys installs a new generation of keys (a reload). Keys accepted
// before and not now are retired: refused and counted as OldKey.
func (a *Auth) SetKeys(keys Keys) {
	r := &ring{seal: keys.Seal, accept: []Key{keys.Seal}}
	if keys.Next != nil {
		r.accept = append(r.accept, *keys.Next)
	}
	if old := a.ring.Load(); old != nil {
		for _, k := range append(old.accept, old.retired...) {
			if _, _, ok := r.find(k.ID); !ok && len(r.retired) < maxRetired {
				r.retired = append(r.retired, k)
			}
		}
	}
	a.ring.Store(r)
	a.watchMu.Lock()
	defer a.watchMu.Unlock()
	for _, f := range a.watchers {
		f()
	}
}

// OnSetKeys calls f after every later SetKeys (a reload): for holders of
// keys derived from the cluster key (GossipKeys).
func (a *Auth) OnSetKeys(f func()) {
	a.watchMu.Lock()
	defer a.watchMu.Unlock()
	a.watchers = append(a.watchers, f)
}

// GossipKeys are the AES-256 keys of the gossip (memberlist's keyring),
// derived from the cluster keys: the sealing key's first, then the other
// accepted one. Gossip carries layouts and stats, so it is held to the
// same keys as node ops, and rotates with them.
func (a *Auth) GossipKeys() [][]byte {
	r := a.ring.Load()
	keys := make([][]byte, 0, len(r.accept))
	for _, k := range r.accept {
		m := hmac.New(sha256.New, k.secret)
		m.Write([]byte("netdir gossip key"))
		keys = append(keys, m.Sum(nil))
	}
	return keys
}

// SealID is the id of the key ops are sealed with now.
func (a *Auth) SealID() uint32 { return a.ring.Load().seal.ID }

// counter is the next counter: the wall clock in ns, strictly above the
// last one.
func (a *Auth) counter() uint64 {
	now := uint64(a.now().UnixNano())
	for {
		last := a.last.Load()
		c := max(last+1, now)
		if a.last.CompareAndSwap(last, c) {
			return c
		}
	}
}

// Seal appends the trailer to node op b and returns the extended slice.
func (a *Auth) Seal(b []byte) []byte {
	a.shared.Lock()
	defer a.shared.Unlock()
	return a.shared.s.Seal(b)
}

// NewSealer returns a Sealer for one goroutine.
func (a *Auth) NewSealer() *Sealer { return &Sealer{a: a} }

// Sealer seals node ops for one goroutine, with no allocation once its
// MAC state is made.
type Sealer struct {
	a   *Auth
	r   *ring
	h   hash.Hash
	sum [sha256.Size]byte
}

// Seal appends the trailer to node op b (header, lengths, key, value,
// extension) and returns the extended slice.
func (s *Sealer) Seal(b []byte) []byte {
	if r := s.a.ring.Load(); r != s.r {
		s.r, s.h = r, hmac.New(sha256.New, r.seal.secret)
	}
	b = binary.BigEndian.AppendUint32(b, s.r.seal.ID)
	b = binary.BigEndian.AppendUint64(b, s.a.counter())
	s.h.Reset()
	s.h.Write(b)
	return append(b, s.h.Sum(s.sum[:0])[:MACLen]...)
}

// windowKey names whose counters a window holds: a node's by id; a
// controller's (id 0, possibly several, each with its own clock) by id and
// source address.
type windowKey struct {
	id   wire.NodeID
	from netip.AddrPort
}

// Open checks the trailer of node op b, from sender (the header's node) at
// source from, and returns b without the trailer. A packet that fails is
// counted under its Verdict.
func (a *Auth) Open(b []byte, sender wire.NodeID, from netip.AddrPort) ([]byte, Verdict) {
	if len(b) < wire.HeaderLen+TrailerLen {
		return nil, a.Drop(BadMAC)
	}
	body, t := b[:len(b)-MACLen], b[len(b)-TrailerLen:]
	k, retired, ok := a.ring.Load().find(binary.BigEndian.Uint32(t))
	if !ok {
		return nil, a.Drop(BadMAC)
	}
	ctr := binary.BigEndian.Uint64(t[4:])
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.mac(k)
	h.Reset()
	h.Write(body)
	if !hmac.Equal(h.Sum(a.sum[:0])[:MACLen], t[12:]) {
		return nil, a.Drop(BadMAC)
	}
	if retired {
		return nil, a.Drop(OldKey)
	}
	wk := windowKey{id: sender}
	if sender == 0 {
		wk.from = from
	}
	w := a.wins[wk]
	if w == nil {
		w = newWindow(a.since)
		a.wins[wk] = w
	}
	if !w.accept(ctr) {
		return nil, a.Drop(Replay)
	}
	return b[:len(b)-TrailerLen], OK
}

// mac is the verification state for k (a.mu held), remade when the keys
// change.
func (a *Auth) mac(k Key) hash.Hash {
	if r := a.ring.Load(); r != a.macR {
		a.macR, a.macs = r, make(map[uint32]hash.Hash, 4)
	}
	h := a.macs[k.ID]
	if h == nil {
		h = hmac.New(sha256.New, k.secret)
		a.macs[k.ID] = h
	}
	return h
}

// Drop counts a refused node op and returns v.
func (a *Auth) Drop(v Verdict) Verdict {
	a.drops[v].Add(1)
	return v
}

// Drops are the counts of refused node ops.
func (a *Auth) Drops() Drops {
	return Drops{
		BadMAC: a.drops[BadMAC].Load(), Replay: a.drops[Replay].Load(),
		OldKey: a.drops[OldKey].Load(), UnknownSender: a.drops[UnknownSender].Load(),
	}
}

// window is one sender's accepted counters: every counter above floor that
// was accepted is in seen, and seen holds at most Window of them, in
// arrival order in order. Evicting a counter raises floor to it, so a
// counter is never accepted twice.
type window struct {
	floor uint64
	seen  map[uint64]struct{}
	order []uint64
	next  int
}

func newWindow(floor uint64) *window {
	return &window{floor: floor, seen: make(map[uint64]struct{}, Window)}
}

// accept reports whether c is new, and remembers it.
func (w *window) accept(c uint64) bool {
	if c <= w.floor {
		return false
	}
	if _, dup := w.seen[c]; dup {
		return false
	}
	if len(w.order) < Window {
		w.order = append(w.order, c)
	} else {
		old := w.order[w.next]
		delete(w.seen, old)
		w.floor = max(w.floor, old)
		w.order[w.next] = c
		w.next = (w.next + 1) % Window
	}
	w.seen[c] = struct{}{}
	return true
}
