package controller

import (
	"errors"
	"fmt"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/wire"
)

// Host agents (eBPF, package nicagent) are data planes the controller does
// not program over P4Runtime: they subscribe to the directory and report
// what they counted. Their reports are deltas, gathered here between rounds
// and added by the next hot-key round to the switches' counters: slot hits
// to the cached keys' counts, the sketch's growth to the miss sketch that
// bounds the nodes' candidates from below.

// maxAgentHits bounds one report's slot hits (a directory is at most a few
// thousand keys; the agent's maps hold at most 65,536).
const maxAgentHits = 1 << 16

// agentSeen is the last report taken from an agent.
type agentSeen struct {
	incarnation, sequence uint64
}

// agentTallies are the agent counts gathered since the last round.
type agentTallies struct {
	hits   map[wire.KeyHash]uint64
	sketch [directory.SketchRows][directory.SketchCols]uint64
}

// AgentTotals are the counts taken from agents since the controller
// started, for metrics and tests.
type AgentTotals struct {
	Reports, Duplicates uint64
	Hits                uint64 // slot hits
	Misses              uint64 // sketch growth of row 0: one per miss counted
}

// ErrAgentReport is wrapped by ReportAgent's refusals of malformed reports.
var ErrAgentReport = errors.New("controller: malformed agent report")

// ReportAgent takes an agent's report for the next hot-key round. It
// reports whether the report is a duplicate (its sequence was taken before:
// nothing is added). A report whose sketch shape differs from the
// controller's, or with a malformed key hash, is refused whole.
func (c *Controller) ReportAgent(s *api.AgentStats) (duplicate bool, err error) {
	if s.GetAgent() == "" {
		return false, fmt.Errorf("%w: no agent name", ErrAgentReport)
	}
	if len(s.GetHits()) > maxAgentHits {
		return false, fmt.Errorf("%w: %d slot hits", ErrAgentReport, len(s.GetHits()))
	}
	for _, h := range s.GetHits() {
		if len(h.GetKeyHash()) != wire.KeyHashLen {
			return false, fmt.Errorf("%w: a %d-byte key hash", ErrAgentReport, len(h.GetKeyHash()))
		}
	}
	if len(s.GetSketch()) > 0 && (s.GetSketchRows() != directory.SketchRows || s.GetSketchCols() != directory.SketchCols) {
		return false, fmt.Errorf("%w: a %d×%d sketch, the controller's is %d×%d", ErrAgentReport,
			s.GetSketchRows(), s.GetSketchCols(), directory.SketchRows, directory.SketchCols)
	}
	for _, cell := range s.GetSketch() {
		if cell.GetIndex() >= directory.SketchRows*directory.SketchCols {
			return false, fmt.Errorf("%w: sketch cell %d", ErrAgentReport, cell.GetIndex())
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.agentSeen == nil {
		c.agentSeen = map[string]agentSeen{}
	}
	seen, ok := c.agentSeen[s.GetAgent()]
	if ok && seen.incarnation == s.GetIncarnation() && s.GetSequence() <= seen.sequence {
		c.agentTotals.Duplicates++
		return true, nil
	}
	c.agentSeen[s.GetAgent()] = agentSeen{incarnation: s.GetIncarnation(), sequence: s.GetSequence()}
	if c.agentTally.hits == nil {
		c.agentTally.hits = map[wire.KeyHash]uint64{}
	}
	for _, h := range s.GetHits() {
		var kh wire.KeyHash
		copy(kh[:], h.GetKeyHash())
		c.agentTally.hits[kh] += h.GetHits()
		c.agentTotals.Hits += h.GetHits()
	}
	for _, cell := range s.GetSketch() {
		r, col := cell.GetIndex()/directory.SketchCols, cell.GetIndex()%directory.SketchCols
		c.agentTally.sketch[r][col] += cell.GetCount()
		if r == 0 {
			c.agentTotals.Misses += cell.GetCount()
		}
	}
	c.agentTotals.Reports++
	return false, nil
}

// takeAgentTalliesLocked returns the agents' counts since the last round and
// starts afresh. c.mu is held.
func (c *Controller) takeAgentTalliesLocked() agentTallies {
	t := c.agentTally
	c.agentTally = agentTallies{}
	return t
}

// AgentTotals returns the counts taken from agents so far.
func (c *Controller) AgentTotals() AgentTotals {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agentTotals
}
