package system

import (
	"bytes"
	"os"
	"path/filepath"
)

// P4InfoRel is the P4Info's path in the repository (scripts/p4-build.sh).
const P4InfoRel = "p4/build/netdir.p4info.txtpb"

// P4InfoEnv names an environment variable that overrides FindP4Info.
const P4InfoEnv = "NETDIR_P4INFO"

// FindP4Info returns the path of the netdir P4Info: $NETDIR_P4INFO if set,
// else P4InfoRel in the netdir module root found upward from the working
// directory (so `go run ./cmd/netdir demo` from any directory of a clone finds
// it) or from the executable's directory. It returns "" when there is none.
func FindP4Info() string {
	if p := os.Getenv(P4InfoEnv); p != "" {
		return p
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, d := range starts {
		for range 32 { // bounded walk to the filesystem root
			if isNetdirRoot(d) {
				p := filepath.Join(d, P4InfoRel)
				if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
					return p
				}
				break
			}
			up := filepath.Dir(d)
			if up == d {
				break
			}
			d = up
		}
	}
	return ""
}

func isNetdirRoot(d string) bool {
	b, err := os.ReadFile(filepath.Join(d, "go.mod"))
	return err == nil && bytes.Contains(b, []byte("module github.com/netdir/netdir"))
}
