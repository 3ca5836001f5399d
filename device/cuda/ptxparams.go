package cuda

import (
	"bufio"
	"fmt"
	"strings"
)

// ptxParam is the type of one kernel parameter as the PTX declares it.
type ptxParam string

// Parameter types the kernels use: .u32 (C int), .f32 (float), .u64 (a pointer or a C long).
const (
	paramU32 ptxParam = ".u32"
	paramF32 ptxParam = ".f32"
	paramU64 ptxParam = ".u64"
)

// ptxSignatures parses the .entry declarations of PTX text: each kernel's parameter types
// in order.
func ptxSignatures(ptx string) (map[string][]ptxParam, error) {
	sigs := map[string][]ptxParam{}
	sc := bufio.NewScanner(strings.NewReader(ptx))
	var cur string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, ".visible .entry ") || strings.HasPrefix(line, ".entry "):
			name := line[strings.Index(line, ".entry ")+len(".entry "):]
			name, open := strings.CutSuffix(name, "(")
			if !open {
				return nil, fmt.Errorf("ptx: entry %q: expected its parameter list", name)
			}
			cur = name
			sigs[cur] = []ptxParam{}
		case cur != "" && strings.HasPrefix(line, ".param "):
			f := strings.Fields(line)
			if len(f) < 3 {
				return nil, fmt.Errorf("ptx: entry %s: parameter %q", cur, line)
			}
			switch t := ptxParam(f[1]); t {
			case paramU32, paramF32, paramU64:
				sigs[cur] = append(sigs[cur], t)
			default:
				return nil, fmt.Errorf("ptx: entry %s: parameter type %s is not one the backend passes", cur, f[1])
			}
		case cur != "" && strings.HasPrefix(line, ")"):
			cur = ""
		}
	}
	return sigs, sc.Err()
}

// checkArgs reports how args (as launch receives them) differ from the kernel's PTX
// parameters: their number, or a Go type whose size or kind is not the parameter's.
func checkArgs(fn string, sig []ptxParam, args []any) error {
	if len(args) != len(sig) {
		return fmt.Errorf("cuda: kernel %s takes %d parameters, launched with %d", fn, len(sig), len(args))
	}
	for i, a := range args {
		ok := false
		switch a.(type) {
		case int:
			ok = sig[i] == paramU32
		case float32:
			ok = sig[i] == paramF32
		case uint64, int64:
			ok = sig[i] == paramU64
		}
		if !ok {
			return fmt.Errorf("cuda: kernel %s parameter %d is %s, launched with a %T", fn, i, sig[i], a)
		}
	}
	return nil
}
