package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/netdir/netdir/client"
)

// KVInput is one operation of a recorded history: 'g' get, 'p' put, 'd'
// delete.
type KVInput struct {
	Op  byte
	Key string
	Val string
}

// KVOutput is an operation's answer.
type KVOutput struct {
	Val     string
	Found   bool
	Ver     uint64
	Unknown bool // a write whose outcome is unknown (its context ended)
}

type kvState struct {
	Val    string
	Exists bool
}

// KVModel is the key-value store for Porcupine, partitioned by key.
var KVModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		m := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(KVInput).Key
			if _, ok := m[k]; !ok {
				keys = append(keys, k)
			}
			m[k] = append(m[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, m[k])
		}
		return out
	},
	Init: func() any { return kvState{} },
	Step: func(st, in, out any) (bool, any) {
		s, i, o := st.(kvState), in.(KVInput), out.(KVOutput)
		switch i.Op {
		case 'g':
			return o.Found == s.Exists && (!s.Exists || o.Val == s.Val), s
		case 'p':
			return true, kvState{Val: i.Val, Exists: true}
		default:
			return true, kvState{}
		}
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(KVInput), out.(KVOutput)
		switch i.Op {
		case 'g':
			return fmt.Sprintf("get(%s) -> %q found=%v v%d", i.Key, o.Val, o.Found, o.Ver)
		case 'p':
			return fmt.Sprintf("put(%s, %q) -> v%d unknown=%v", i.Key, i.Val, o.Ver, o.Unknown)
		}
		return fmt.Sprintf("del(%s) -> v%d unknown=%v", i.Key, o.Ver, o.Unknown)
	},
}

// HistoryConfig is one recorded run of concurrent clients over a few keys.
type HistoryConfig struct {
	Clients, OpsPer, Keys int
	Prefix                string // keys are Prefix-k0 … Prefix-k<Keys-1>
	Seed                  uint64
	// Gets and Puts are the shares of gets and puts in percent; the rest
	// are deletes.
	Gets, Puts int
	OpTimeout  time.Duration // each operation's context
	Client     client.Options
}

// Key is the history's key i.
func (hc HistoryConfig) Key(i int) string { return fmt.Sprintf("%s-k%d", hc.Prefix, i) }

// History is a recorded run: its operations for Porcupine, and per key
// the highest version of an acknowledged write, which must survive.
type History struct {
	Ops   []porcupine.Operation
	Acked map[string]uint64
}

// RunHistory drives hc.Clients clients concurrently, each doing hc.OpsPer
// random operations, and records the history. A get with no answer is left
// out (it constrains nothing); a write with no answer may take effect at
// any time after its call.
func (c *Cluster) RunHistory(hc HistoryConfig) (History, error) {
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	h := History{Acked: map[string]uint64{}}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for ci := range hc.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(hc.Seed, uint64(ci)))
			cl, err := c.Client(hc.Client)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			defer cl.Close()
			for j := range hc.OpsPer {
				key := hc.Key(r.IntN(hc.Keys))
				ctx, cancel := context.WithTimeout(context.Background(), hc.OpTimeout)
				var in KVInput
				var out KVOutput
				call := now()
				switch x := r.IntN(100); {
				case x < hc.Gets:
					in = KVInput{Op: 'g', Key: key}
					v, ver, err := cl.Get(ctx, []byte(key))
					switch {
					case err == nil:
						out = KVOutput{Val: string(v), Found: true, Ver: ver}
					case errors.Is(err, client.ErrNotFound):
						out = KVOutput{Ver: ver}
					default:
						cancel()
						continue
					}
				case x < hc.Gets+hc.Puts:
					in = KVInput{Op: 'p', Key: key, Val: fmt.Sprintf("%s-c%d-%d", hc.Prefix, ci, j)}
					ver, err := cl.Put(ctx, []byte(key), []byte(in.Val))
					out = KVOutput{Ver: ver, Unknown: err != nil}
				default:
					in = KVInput{Op: 'd', Key: key}
					ver, err := cl.Delete(ctx, []byte(key))
					out = KVOutput{Ver: ver, Unknown: err != nil}
				}
				cancel()
				ret := now()
				if out.Unknown {
					ret = 1 << 62
				}
				mu.Lock()
				if in.Op != 'g' && !out.Unknown {
					h.Acked[key] = max(h.Acked[key], out.Ver)
				}
				h.Ops = append(h.Ops, porcupine.Operation{ClientId: ci, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return h, errors.Join(errs...)
}

// CheckVersions: a version names one value. The writes acknowledged with
// one version of a key are a write group's (one version of the last
// accepted write's value, the others overwritten at once); every read of
// version v returns the value of one of the writes acknowledged at v, if
// any is, and all reads of v return the same.
func (h History) CheckVersions() error {
	type kv struct {
		key string
		ver uint64
	}
	var errs []error
	writes := map[kv][]KVOutput{}
	for _, op := range h.Ops {
		in, out := op.Input.(KVInput), op.Output.(KVOutput)
		if out.Unknown || in.Op == 'g' {
			continue
		}
		k := kv{in.Key, out.Ver}
		writes[k] = append(writes[k], KVOutput{Val: in.Val, Found: in.Op == 'p'})
	}
	read := map[kv]KVOutput{}
	for _, op := range h.Ops {
		in, out := op.Input.(KVInput), op.Output.(KVOutput)
		if in.Op != 'g' || out.Ver == 0 {
			continue
		}
		k := kv{in.Key, out.Ver}
		got := KVOutput{Val: out.Val, Found: out.Found}
		if ws, ok := writes[k]; ok && !slices.Contains(ws, got) {
			errs = append(errs, fmt.Errorf("read of %s v%d = %q/%v, written %v", in.Key, out.Ver, out.Val, out.Found, ws))
		}
		if r, ok := read[k]; ok && r != got {
			errs = append(errs, fmt.Errorf("reads of %s v%d = %q/%v and %q/%v", in.Key, out.Ver, r.Val, r.Found, got.Val, got.Found))
		}
		read[k] = got
	}
	return errors.Join(errs...)
}

// LostWrites reads every key of h.Acked and returns the keys whose version
// is below their last acknowledged write's: that write was lost.
func (c *Cluster) LostWrites(ctx context.Context, o client.Options, acked map[string]uint64) ([]string, error) {
	cl, err := c.Client(o)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var lost []string
	for key, want := range acked {
		_, ver, err := cl.Get(ctx, []byte(key))
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			return lost, fmt.Errorf("read %s: %w", key, err)
		}
		if ver < want {
			lost = append(lost, fmt.Sprintf("%s: version %d, but version %d was acknowledged", key, ver, want))
		}
	}
	return lost, nil
}
