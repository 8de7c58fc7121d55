package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
)

func TestBasic(t *testing.T) {
	c, err := cluster.Start(cluster.Options{N: 3, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := c.Client(client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 20 {
		k := []byte(fmt.Sprintf("k%d", i))
		v1, err := cl.Put(ctx, k, []byte("a"))
		if err != nil || v1 != 1 {
			t.Fatalf("put: %v %v", v1, err)
		}
		v2, err := cl.Put(ctx, k, []byte("b"))
		if err != nil || v2 != 2 {
			t.Fatalf("put2: %v %v", v2, err)
		}
		for range 3 {
			val, ver, err := cl.Get(ctx, k)
			if err != nil || string(val) != "b" || ver != 2 {
				t.Fatalf("get: %q %v %v", val, ver, err)
			}
		}
		dv, err := cl.Delete(ctx, k)
		if err != nil || dv != 3 {
			t.Fatalf("del: %v %v", dv, err)
		}
		_, ver, err := cl.Get(ctx, k)
		if !errors.Is(err, client.ErrNotFound) || ver != 3 {
			t.Fatalf("get after delete: %v %v", ver, err)
		}
	}
}
