package history

import (
	"fmt"
	"sync"
	"time"
)

// Page is one page a tailing reader received: the messages and holes in
// [From, Next), as the reader saw them.
type Page struct {
	Reader     string
	From, Next uint64
	Messages   []Logged
	Holes      [][2]uint64
	// Started is when the reader's tail began (the page was computed
	// after it); Received is when the page arrived.
	Started, Received time.Time
}

// PageLog collects the pages of many readers. Safe for concurrent use.
type PageLog struct {
	mu    sync.Mutex
	pages []Page
}

// Add records a page.
func (l *PageLog) Add(p Page) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pages = append(l.pages, p)
}

// Pages returns a copy of every page, in the order they were added.
func (l *PageLog) Pages() []Page {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Page(nil), l.pages...)
}

// CheckPages verifies that every tailed page agrees with a full read (an
// offset's content never changes once it is below C, contract 5): within
// [From, Next) the page holds exactly the read's messages, at the same
// offsets, and the rest of the range is holes; and each reader's pages
// follow one another with no gap.
func CheckPages(pages []Page, read Read) []error {
	c := &checker{limit: 20}
	type content struct {
		logged Logged
		hole   bool
	}
	at := make(map[uint64]content, len(read.Messages))
	for _, m := range read.Messages {
		at[m.Offset] = content{logged: m}
	}
	for _, h := range read.Holes {
		for o := h[0]; o < h[1]; o++ {
			at[o] = content{hole: true}
		}
	}
	next := make(map[string]uint64)
	for _, p := range pages {
		if want, ok := next[p.Reader]; ok && p.From != want {
			c.fail("reader %s: page starts at %d, the previous one ended at %d", p.Reader, p.From, want)
		}
		next[p.Reader] = p.Next
		if p.Next > read.Committed {
			c.fail("reader %s: page [%d, %d) reaches beyond the full read's C %d", p.Reader, p.From, p.Next, read.Committed)
			continue
		}
		c.checkPage(p, func(o uint64) (Logged, bool, bool) {
			x, ok := at[o]
			return x.logged, x.hole, ok
		})
	}
	return c.errs
}

// checkPage compares one page with the full read's content per offset.
func (c *checker) checkPage(p Page, full func(uint64) (Logged, bool, bool)) {
	seen := make(map[uint64]bool, p.Next-p.From)
	for _, m := range p.Messages {
		seen[m.Offset] = true
		want, hole, ok := full(m.Offset)
		switch {
		case m.Offset < p.From || m.Offset >= p.Next:
			c.fail("reader %s: page [%d, %d) holds offset %d", p.Reader, p.From, p.Next, m.Offset)
		case !ok || hole:
			c.fail("reader %s: offset %d served as %s/%d, the full read has no message there", p.Reader, m.Offset, m.Producer, m.Seq)
		case want != m:
			c.fail("reader %s: offset %d served as %s/%d, the full read has %s/%d", p.Reader, m.Offset, m.Producer, m.Seq, want.Producer, want.Seq)
		}
	}
	for o := p.From; o < p.Next; o++ {
		if seen[o] {
			continue
		}
		if want, hole, ok := full(o); ok && !hole {
			c.fail("reader %s: page [%d, %d) skipped offset %d, which holds %s/%d", p.Reader, p.From, p.Next, o, want.Producer, want.Seq)
		}
	}
}

// SameRead reports how two full reads of the same log differ, if they do
// (contract 6); the shorter read's range is compared.
func SameRead(a, b Read) error {
	end := min(a.Committed, b.Committed)
	am, bm := below(a.Messages, end), below(b.Messages, end)
	if len(am) != len(bm) {
		return fmt.Errorf("below %d: %d messages against %d", end, len(am), len(bm))
	}
	for i := range am {
		if am[i] != bm[i] {
			return fmt.Errorf("offset %d: %s/%d against %s/%d at offset %d", am[i].Offset, am[i].Producer, am[i].Seq, bm[i].Producer, bm[i].Seq, bm[i].Offset)
		}
	}
	return nil
}

func below(messages []Logged, end uint64) []Logged {
	for i, m := range messages {
		if m.Offset >= end {
			return messages[:i]
		}
	}
	return messages
}
