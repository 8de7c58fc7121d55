package directory

import (
	"testing"

	"github.com/netdir/netdir/layout"
)

func TestInstallLayout(t *testing.T) {
	m, err := layout.Parse([]byte("partition_bits: 3\nnodes: [{id: 30, addr: 127.0.0.1:3}, {id: 10, addr: 127.0.0.1:1}, {id: 20, addr: 127.0.0.1:2}, {id: 40, addr: 127.0.0.1:4}]"))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := New(Config{PartitionBits: 3})
	if err := InstallLayout(d, m); err != nil {
		t.Fatal(err)
	}
	if p, ok := d.Partition(3); !ok || p.Chain[0] != 40 || p.R != 3 {
		t.Fatalf("installed partition 3: %+v", p)
	}
	small, _ := New(Config{PartitionBits: 2})
	if err := InstallLayout(small, m); err == nil {
		t.Fatal("installed 8 partitions into 4")
	}
}
