package cluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
)

// Loopback ports are reserved below the kernel's ephemeral range, because a
// cluster binds the same address again after a kill or a restart: a port
// from the ephemeral range can meanwhile become the source port of any
// client socket or outgoing TCP connection on the machine, and the
// restarted member then fails with "address already in use".
const reservedLow = 10000

var reserved struct {
	sync.Mutex
	given map[int]bool
}

// ReserveAddr returns a loopback address whose port is free for both TCP
// and UDP (memberlist binds both) and outside the ephemeral range, and
// never hands the same port out twice in one process.
func ReserveAddr() (string, error) {
	reserved.Lock()
	defer reserved.Unlock()
	if reserved.given == nil {
		reserved.given = map[int]bool{}
	}
	high := ephemeralLow()
	for range 1000 {
		p := reservedLow + rand.IntN(high-reservedLow)
		if reserved.given[p] || !bindable(p) {
			continue
		}
		reserved.given[p] = true
		return fmt.Sprintf("127.0.0.1:%d", p), nil
	}
	return "", fmt.Errorf("cluster: no free loopback port in [%d, %d)", reservedLow, high)
}

func bindable(port int) bool {
	t, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	defer t.Close()
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// ephemeralLow is the lowest port the kernel picks for unbound sockets.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || lo <= reservedLow+1000 {
		return 32768
	}
	return lo
}
