package controller

import (
	"errors"
	"fmt"

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

// AgentReport is one report of a host agent: its counts since its last
// report. An agent re-sends a report it got no answer to with the same
// sequence, and the controller takes each (agent, incarnation, sequence)
// once.
type AgentReport struct {
	Agent       string // unique per agent (host and interface)
	Incarnation uint64 // random per agent start
	Sequence    uint64 // increases with every new report of an incarnation
	Hits        []SlotHits
	// SketchRows and SketchCols are the agent's sketch shape, which must
	// be the controller's; Sketch holds the cells that grew.
	SketchRows, SketchCols uint32
	Sketch                 []SketchCell
}

// SlotHits is a directory key's hits.
type SlotHits struct {
	Hash wire.KeyHash
	Hits uint64
}

// SketchCell is the growth of one cell of the miss sketch: index = row *
// SketchCols + column, columns chosen as directory.SketchIndex chooses them.
type SketchCell struct {
	Index uint32
	Count uint64
}

// ReportAgent takes an agent's report for the next hot-key round. It
// reports whether the report is a duplicate (its sequence was taken before:
// nothing is added). A report whose sketch shape differs from the
// controller's is refused whole.
func (c *Controller) ReportAgent(s AgentReport) (duplicate bool, err error) {
	if s.Agent == "" {
		return false, fmt.Errorf("%w: no agent name", ErrAgentReport)
	}
	if len(s.Hits) > maxAgentHits {
		return false, fmt.Errorf("%w: %d slot hits", ErrAgentReport, len(s.Hits))
	}
	if len(s.Sketch) > 0 && (s.SketchRows != directory.SketchRows || s.SketchCols != directory.SketchCols) {
		return false, fmt.Errorf("%w: a %d×%d sketch, the controller's is %d×%d", ErrAgentReport,
			s.SketchRows, s.SketchCols, directory.SketchRows, directory.SketchCols)
	}
	for _, cell := range s.Sketch {
		if cell.Index >= directory.SketchRows*directory.SketchCols {
			return false, fmt.Errorf("%w: sketch cell %d", ErrAgentReport, cell.Index)
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.agentSeen == nil {
		c.agentSeen = map[string]agentSeen{}
	}
	seen, ok := c.agentSeen[s.Agent]
	if ok && seen.incarnation == s.Incarnation && s.Sequence <= seen.sequence {
		c.agentTotals.Duplicates++
		return true, nil
	}
	c.agentSeen[s.Agent] = agentSeen{incarnation: s.Incarnation, sequence: s.Sequence}
	if c.agentTally.hits == nil {
		c.agentTally.hits = map[wire.KeyHash]uint64{}
	}
	for _, h := range s.Hits {
		c.agentTally.hits[h.Hash] += h.Hits
		c.agentTotals.Hits += h.Hits
	}
	for _, cell := range s.Sketch {
		r, col := cell.Index/directory.SketchCols, cell.Index%directory.SketchCols
		c.agentTally.sketch[r][col] += cell.Count
		if r == 0 {
			c.agentTotals.Misses += cell.Count
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
