package device

import (
	"os"
	"strings"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// pageSize is the kernel's page: the unit the page cache holds.
const pageSize = 4 << 10

// pageCache is a node's page cache (see the package doc, "The page
// cache"): a bounded LRU of 4 KiB pages, filled by what the node writes
// and by what it reads from the device, and dropped with their file.
//
// Pages are keyed by a file's identity, not its name, as the kernel keys
// them by inode: Pebble recycles WAL files by renaming them, and a rename
// keeps the pages and their recency. held indexes each file's pages so
// that dropping a file does not scan the LRU; the LRU's eviction callback
// keeps it in step.
type pageCache struct {
	mu    sync.Mutex
	limit int // pages
	lru   *simplelru.LRU[pageKey, struct{}]
	ids   map[string]uint64 // name -> identity
	held  map[uint64]map[int64]struct{}
	maxID uint64
}

type pageKey struct {
	file uint64
	page int64
}

func newPageCache(bytes int64) *pageCache {
	if bytes < pageSize {
		return nil
	}
	c := &pageCache{limit: int(bytes / pageSize), ids: map[string]uint64{}, held: map[uint64]map[int64]struct{}{}}
	c.lru, _ = simplelru.NewLRU(c.limit, func(k pageKey, _ struct{}) {
		pages := c.held[k.file]
		delete(pages, k.page)
		if len(pages) == 0 {
			delete(c.held, k.file)
		}
	})
	return c
}

// pages returns the pages that bytes [off, off+n) fall in.
func pages(off, n int64) (first, last int64) {
	return off / pageSize, (off + n - 1) / pageSize
}

// idOf returns file's identity, giving it one if it has none.
func (c *pageCache) idOf(file string) uint64 {
	id, ok := c.ids[file]
	if !ok {
		c.maxID++
		id = c.maxID
		c.ids[file] = id
	}
	return id
}

// add puts the pages of bytes [off, off+n) of file in the cache as the
// most recent, evicting the least recent beyond the limit.
func (c *pageCache) add(file string, off, n int64) {
	if c == nil || n <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	first, last := pages(off, n)
	first = max(first, last-int64(c.limit)+1) // the rest would be evicted at once
	id := c.idOf(file)
	for p := first; p <= last; p++ {
		pages := c.held[id]
		if pages == nil {
			pages = map[int64]struct{}{}
			c.held[id] = pages
		}
		pages[p] = struct{}{}
		c.lru.Add(pageKey{id, p}, struct{}{})
	}
}

// missing returns how many bytes of [off, off+n) of file lie in pages the
// cache does not hold (0: a hit, served from memory), and refreshes the
// pages it holds.
func (c *pageCache) missing(file string, off, n int64) int64 {
	if n <= 0 {
		return 0
	}
	if c == nil {
		return n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	id, known := c.ids[file]
	first, last := pages(off, n)
	var miss int64
	for p := first; p <= last; p++ {
		if known {
			if _, ok := c.lru.Get(pageKey{id, p}); ok {
				continue
			}
		}
		// the page's part of the range
		miss += min(off+n, (p+1)*pageSize) - max(off, p*pageSize)
	}
	return miss
}

// drop forgets file's pages: it was removed, or renamed over.
func (c *pageCache) drop(file string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(file)
}

func (c *pageCache) dropLocked(file string) {
	id, ok := c.ids[file]
	if !ok {
		return
	}
	delete(c.ids, file)
	for p := range c.held[id] {
		c.lru.Remove(pageKey{id, p}) // the eviction callback updates held
	}
}

// dropUnder forgets the pages of every file under dir.
func (c *pageCache) dropUnder(dir string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.ids {
		if name == dir || strings.HasPrefix(name, dir) && os.IsPathSeparator(name[len(dir)]) {
			c.dropLocked(name)
		}
	}
}

// rename moves file's pages to a new name (Pebble recycles WAL files by
// renaming them), dropping what the new name held.
func (c *pageCache) rename(from, to string) {
	if c == nil || from == to {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(to)
	if id, ok := c.ids[from]; ok {
		delete(c.ids, from)
		c.ids[to] = id
	}
}
