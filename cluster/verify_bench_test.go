package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/wire"
)

// BenchmarkWrittenHotKeyExtraShare repeats issue 18's new-user check: four
// nodes (R=3) behind the software data plane, the hot key promoted with one
// extra, 12 clients, 25% writes to it. It reports the share of the key's
// reads that the extra served (%extra; issue 18 measured 0.89% under the
// old rule), how many of those were verified at the tail (%verified), and
// the tail's version answers per read of the key (tail-answers/read: to
// the extra and to dirty chain members).
func BenchmarkWrittenHotKeyExtraShare(b *testing.B) {
	c, opts := extraCluster(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cls := make([]*client.Client, 12)
	for i := range cls {
		var err error
		if cls[i], err = c.Client(opts); err != nil {
			b.Fatal(err)
		}
		defer cls[i].Close()
	}
	key := []byte("hot")
	if _, err := cls[0].Put(ctx, key, []byte("v0")); err != nil {
		b.Fatal(err)
	}
	extra := promoteWithExtra(b, ctx, c, cls[0], key)
	ch := c.Layout.ChainOf(wire.HashKey(key))
	before := nodeGets(c)
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for i, cl := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(18, uint64(i)))
			for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
				octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
				if r.IntN(100) < 25 {
					cl.Put(octx, key, []byte(fmt.Sprint(n)))
				} else {
					cl.Get(octx, key)
				}
				ocancel()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	after := nodeGets(c)
	var total uint64
	for i := range after {
		total += after[i].Gets - before[i].Gets
	}
	e, t := int(extra)-1, int(ch[len(ch)-1])-1
	atExtra := after[e].Gets - before[e].Gets
	verified := after[e].VerifiedGets - before[e].VerifiedGets
	answers := after[t].VerAnswersValue + after[t].VerAnswersSame - before[t].VerAnswersValue - before[t].VerAnswersSame
	b.ReportMetric(100*float64(atExtra)/float64(max(total, 1)), "%extra")
	b.ReportMetric(100*float64(verified)/float64(max(atExtra, 1)), "%verified")
	b.ReportMetric(float64(answers)/float64(max(total, 1)), "tail-answers/read")
}
