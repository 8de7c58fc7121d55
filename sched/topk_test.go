package sched

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func TestTopKFindsHeavyHitters(t *testing.T) {
	tk := NewTopK(16)
	r := rand.New(rand.NewPCG(1, 2))
	// Keys h0..h2 draw 30%, 20% and 10% of 20000 requests; the rest are
	// spread over 5000 cold keys.
	truth := map[string]uint64{}
	for i := 0; i < 20000; i++ {
		var k string
		switch x := r.Float64(); {
		case x < 0.3:
			k = "h0"
		case x < 0.5:
			k = "h1"
		case x < 0.6:
			k = "h2"
		default:
			k = fmt.Sprintf("c%d", r.IntN(5000))
		}
		truth[k]++
		tk.Add([]byte(k))
	}
	top := tk.Top(3)
	for i, want := range []string{"h0", "h1", "h2"} {
		if string(top[i].Key) != want {
			t.Fatalf("top %v: want h0, h1, h2 first", top)
		}
		// Space-Saving never underestimates, and overestimates by at most N/k.
		if top[i].Count < truth[want] || top[i].Count > truth[want]+20000/16 {
			t.Errorf("%s counted %d, true %d", want, top[i].Count, truth[want])
		}
	}
	if len(tk.Top(3)) != 0 {
		t.Error("Top did not start a new round")
	}
}

func TestTopKExactWhileUnderCapacity(t *testing.T) {
	tk := NewTopK(4)
	for i, k := range []string{"a", "b", "a", "c", "a", "b"} {
		_ = i
		tk.Add([]byte(k))
	}
	if got := fmt.Sprint(tk.Top(10)); got != "[{[97] 3} {[98] 2} {[99] 1}]" {
		t.Fatalf("Top = %s", got)
	}
}

// TestTopKNoAllocs: once its k counters exist, counting a key, new or not,
// allocates nothing (an evicted counter's key buffer takes the new key),
// and the keys reported are still right.
func TestTopKNoAllocs(t *testing.T) {
	tk := NewTopK(4)
	keys := make([][]byte, 64)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%03d", i)
	}
	for _, k := range keys[:4] {
		tk.Add(k)
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() { tk.Add(keys[i%len(keys)]); i++ }); n != 0 {
		t.Errorf("%v allocations per Add, want 0", n)
	}
	for range 100 {
		tk.Add(keys[7])
	}
	if top := tk.Top(1); len(top) != 1 || string(top[0].Key) != "key-007" {
		t.Errorf("Top(1) = %v, want key-007", top)
	}
}

// TestTopKMatchesScan: the heap picks the same counter to take over as a
// scan for the smallest (count, key), so the counts match Space-Saving's;
// for short keys and for keys that share their first 16 bytes, end in
// zero bytes or prefix one another (the heap orders by a key's first 16
// bytes before the key); its index finds every key counted after others
// leave it.
func TestTopKMatchesScan(t *testing.T) {
	// Keys of 15 to 19 bytes over 'a' and the zero byte, so that many
	// share their first 16 bytes or prefix one another.
	tails := rand.New(rand.NewPCG(5, 6))
	mixed := make([]string, 200)
	for i := range mixed {
		b := []byte("aaaaaaaa")
		for j := range 7 + tails.IntN(5) {
			if j < 4 || j >= 7 {
				b = append(b, "\x00a"[tails.IntN(2)])
			} else {
				b = append(b, 'a')
			}
		}
		mixed[i] = string(b)
	}
	keys := map[string]func(i int) string{
		"short": func(i int) string { return fmt.Sprintf("k%d", i) },
		"mixed": func(i int) string { return mixed[i%len(mixed)] },
		"long":  func(i int) string { return fmt.Sprintf("%016d%d", 0, i) },
	}
	for name, keyOf := range keys {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, 4))
			tk := NewTopK(8)
			ref := map[string]uint64{}
			for range 20000 {
				key := keyOf(int(r.ExpFloat64() * 20))
				tk.Add([]byte(key))
				if _, ok := ref[key]; ok || len(ref) < 8 {
					ref[key]++
					continue
				}
				min := ""
				for k, c := range ref {
					if min == "" || c < ref[min] || (c == ref[min] && k < min) {
						min = k
					}
				}
				ref[key] = ref[min] + 1
				delete(ref, min)
			}
			top := tk.Top(8)
			if len(top) != len(ref) {
				t.Fatalf("%d counters, want %d", len(top), len(ref))
			}
			for _, kc := range top {
				if ref[string(kc.Key)] != kc.Count {
					t.Errorf("%q: count %d, want %d", kc.Key, kc.Count, ref[string(kc.Key)])
				}
			}
		})
	}
}

// BenchmarkTopKAdd counts a skewed stream over 100k keys with 64 counters,
// as a storage node counts its directory misses: most keys are new to the
// counters and take the smallest over.
func BenchmarkTopKAdd(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := make([][]byte, 1<<16)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "user%012d", int(100_000*math.Pow(r.Float64(), 3)))
	}
	tk := NewTopK(64)
	i := 0
	for b.Loop() {
		tk.Add(keys[i&(len(keys)-1)])
		i++
	}
}

// TestTopKRoundsAreIndependent: after Top, a round counts as a new TopK
// would, for keys short and long; the keys Top returns are each their own
// (appending to one leaves the next as it was).
func TestTopKRoundsAreIndependent(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	keyOf := func() []byte {
		i := int(r.ExpFloat64() * 30)
		if i%3 == 0 {
			return fmt.Appendf(nil, "a-long-key-of-more-than-16-bytes-%d", i)
		}
		return fmt.Appendf(nil, "k%d", i)
	}
	tk := NewTopK(16)
	for round := range 3 {
		fresh := NewTopK(16)
		for range 5000 {
			key := keyOf()
			tk.Add(key)
			fresh.Add(key)
		}
		got, want := tk.Top(16), fresh.Top(16)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %d: Top = %v, want %v", round, got, want)
		}
		for i := range got[:len(got)-1] {
			next := string(got[i+1].Key)
			_ = append(got[i].Key, "xxxxxxxxxxxxxxxxxxxx"...)
			if string(got[i+1].Key) != next {
				t.Fatalf("round %d: appending to key %d changed key %d to %q", round, i, i+1, got[i+1].Key)
			}
		}
	}
}

// TestTopKAllIsTopUnsorted: All reports the counters Top(k) does, keys and
// counts, in some order, and starts a new round too.
func TestTopKAllIsTopUnsorted(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for round := range 5 {
		a, b := NewTopK(16), NewTopK(16)
		for range 3000 {
			key := []byte(fmt.Sprintf("k%d", int(r.ExpFloat64()*float64(10+10*round))))
			a.Add(key)
			b.Add(key)
		}
		all, top := a.All(), b.Top(16)
		slices.SortFunc(all, func(x, y KeyCount) int {
			return cmp.Or(cmp.Compare(y.Count, x.Count), bytes.Compare(x.Key, y.Key))
		})
		if !reflect.DeepEqual(all, top) {
			t.Fatalf("round %d: All %v, Top %v", round, all, top)
		}
		if len(a.All()) != 0 {
			t.Fatal("All did not start a new round")
		}
	}
}
