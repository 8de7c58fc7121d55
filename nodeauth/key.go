// Package nodeauth authenticates node ops (wire.Op.IsNodeOp): the messages
// that storage nodes and controllers exchange — chain writes and acks,
// version queries, copies, promote, demote, sync, stats — which no client
// may send.
//
// Every node op carries a trailer after its last byte (after the value and
// any extension, so data planes, which parse only the fixed header, pass it
// untouched):
//
//	offset from the end  size  field
//	                 28     4  key id: which cluster key sealed it (KeyID)
//	                 24     8  counter: the sender's, strictly increasing
//	                 16    16  MAC: HMAC-SHA256 of every byte before it, truncated
//
// The sender is the header's node field (0: a controller). The counter is
// the sender's wall clock in nanoseconds, kept strictly increasing
// (max(last+1, now)), so a restarted sender continues above every counter it
// sent before and is never locked out. A receiver accepts each (sender,
// counter) once: it refuses counters from before it started, and remembers
// the last Window counters of each sender; older ones are refused (see
// Window). So a captured op cannot be replayed, neither to a running node nor
// to one that restarted since.
//
// Why HMAC-SHA256: it is in the standard library, and on CPUs with SHA
// extensions (amd64 sha_ni, arm64 sha2) it costs about 0.3 µs for a small
// node op (BenchmarkSeal). A chain write already costs a synced Pebble write,
// so it does not matter there; client GETs and PUTs are not node ops and pay
// nothing. Poly1305 would need a fresh one-time key per message (a ChaCha20
// block), and BLAKE2s is not in the standard library.
//
// Keys rotate without downtime: a key file holds the key nodes seal with and
// optionally a next key that they also accept (ParseKeys), and every holder
// reloads it on SIGHUP or when the file changes (Watch).
package nodeauth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// MinKeyLen is the shortest key accepted, in bytes.
const MinKeyLen = 32

// EnvKeyFile names the environment variable that holds the key file's path
// when no flag or configuration field does.
const EnvKeyFile = "NETDIR_CLUSTER_KEY_FILE"

// Key is one cluster key.
type Key struct {
	ID     uint32 // KeyID of the secret, carried in trailers
	secret []byte
}

// KeyID names a secret without revealing it: the first 4 bytes of
// SHA-256 over a label and the secret.
func KeyID(secret []byte) uint32 {
	h := sha256.New()
	h.Write([]byte("netdir cluster key id\x00"))
	h.Write(secret)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// NewKey makes a key of secret, which must be at least MinKeyLen bytes.
func NewKey(secret []byte) (Key, error) {
	if len(secret) < MinKeyLen {
		return Key{}, fmt.Errorf("nodeauth: key of %d bytes, want at least %d", len(secret), MinKeyLen)
	}
	return Key{ID: KeyID(secret), secret: bytes.Clone(secret)}, nil
}

// Keys are the keys a key file holds: Seal, which nodes seal with and
// accept, and Next, which they accept as well during a rotation.
type Keys struct {
	Seal Key
	Next *Key
}

// keyFile is the YAML form:
//
//	key: 64 hex digits    # seal with it, and accept it
//	next: 64 hex digits   # accept it too (optional)
type keyFile struct {
	Key  string `yaml:"key"`
	Next string `yaml:"next,omitempty"`
}

// ParseKeys reads a key file.
func ParseKeys(b []byte) (Keys, error) {
	var f keyFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return Keys{}, fmt.Errorf("nodeauth: key file: %w", err)
	}
	var ks Keys
	var err error
	if ks.Seal, err = parseHexKey("key", f.Key); err != nil {
		return Keys{}, err
	}
	if f.Next != "" {
		nk, err := parseHexKey("next", f.Next)
		if err != nil {
			return Keys{}, err
		}
		if nk.ID != ks.Seal.ID {
			ks.Next = &nk
		}
	}
	return ks, nil
}

func parseHexKey(field, s string) (Key, error) {
	if s == "" {
		return Key{}, fmt.Errorf("nodeauth: key file: no %s", field)
	}
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return Key{}, fmt.Errorf("nodeauth: key file: %s: %w", field, err)
	}
	k, err := NewKey(b)
	if err != nil {
		return Key{}, fmt.Errorf("nodeauth: key file: %s: %w", field, err)
	}
	return k, nil
}

// LoadKeys reads the key file at path.
func LoadKeys(path string) (Keys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Keys{}, fmt.Errorf("nodeauth: %w", err)
	}
	ks, err := ParseKeys(b)
	if err != nil {
		return Keys{}, fmt.Errorf("%w (%s)", err, path)
	}
	return ks, nil
}

// GenerateSecret returns a random secret of MinKeyLen bytes.
func GenerateSecret() []byte {
	b := make([]byte, MinKeyLen)
	rand.Read(b)
	return b
}

// FormatKeys is the key file holding seal (and next, if not nil) secrets.
func FormatKeys(seal, next []byte) []byte {
	f := keyFile{Key: hex.EncodeToString(seal)}
	if next != nil {
		f.Next = hex.EncodeToString(next)
	}
	b, _ := yaml.Marshal(f)
	return b
}

// File is the key file holding ks.
func (ks Keys) File() []byte {
	var next []byte
	if ks.Next != nil {
		next = ks.Next.secret
	}
	return FormatKeys(ks.Seal.secret, next)
}

// ErrNoKeyFile is KeyFilePath's error when neither the flag nor the
// environment names a key file.
var ErrNoKeyFile = errors.New("nodeauth: no cluster key file (--cluster-key-file or " + EnvKeyFile + ")")

// KeyFilePath is the key file to use: flag if set, else the environment's.
func KeyFilePath(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if p := os.Getenv(EnvKeyFile); p != "" {
		return p, nil
	}
	return "", ErrNoKeyFile
}
