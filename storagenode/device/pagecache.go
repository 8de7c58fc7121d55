package device

import (
	"container/list"
	"os"
	"strings"
	"sync"
)

// pageSize is the kernel's page: the unit the page cache holds.
const pageSize = 4 << 10

// pageCache is a node's page cache (see the package doc, "The page
// cache"): a bounded LRU of 4 KiB pages, filled by what the node writes
// and by what it reads from the device, and dropped with their file.
type pageCache struct {
	mu    sync.Mutex
	limit int       // pages
	lru   list.List // of pageKey, most recent first
	files map[string]map[int64]*list.Element
}

type pageKey struct {
	file string
	page int64
}

func newPageCache(bytes int64) *pageCache {
	if bytes < pageSize {
		return nil
	}
	return &pageCache{limit: int(bytes / pageSize), files: map[string]map[int64]*list.Element{}}
}

// pages returns the pages that bytes [off, off+n) fall in.
func pages(off, n int64) (first, last int64) {
	return off / pageSize, (off + n - 1) / pageSize
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
	held := c.files[file]
	if held == nil {
		held = map[int64]*list.Element{}
		c.files[file] = held
	}
	for p := first; p <= last; p++ {
		if e, ok := held[p]; ok {
			c.lru.MoveToFront(e)
			continue
		}
		held[p] = c.lru.PushFront(pageKey{file, p})
	}
	for c.lru.Len() > c.limit {
		c.evict(c.lru.Back())
	}
}

func (c *pageCache) evict(e *list.Element) {
	k := c.lru.Remove(e).(pageKey)
	held := c.files[k.file]
	delete(held, k.page)
	if len(held) == 0 {
		delete(c.files, k.file)
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
	held := c.files[file]
	first, last := pages(off, n)
	var miss int64
	for p := first; p <= last; p++ {
		if e, ok := held[p]; ok {
			c.lru.MoveToFront(e)
			continue
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
	for _, e := range c.files[file] {
		c.lru.Remove(e)
	}
	delete(c.files, file)
}

// dropUnder forgets the pages of every file under dir.
func (c *pageCache) dropUnder(dir string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.files {
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
	held := c.files[from]
	if held == nil {
		return
	}
	for _, e := range held {
		e.Value = pageKey{to, e.Value.(pageKey).page}
	}
	c.files[to] = held
	delete(c.files, from)
}
