// Package benchutil holds what several benchmark commands share: starting
// `orderlog dev` and reading its banner for its addresses, and medians of
// rounds. Only
// benchmarks import it.
package benchutil

import (
	"bufio"
	"errors"
	"io"
	"sort"
	"strings"
)

// ReadGRPCAddr reads `orderlog dev`'s banner for the gRPC address it got,
// then keeps draining its output in the background.
func ReadGRPCAddr(stdout io.Reader) (string, error) {
	scanner := bufio.NewScanner(stdout)
	for scanner.Scan() {
		if addr, ok := strings.CutPrefix(strings.TrimSpace(scanner.Text()), "gRPC "); ok {
			go func() {
				for scanner.Scan() {
				}
			}()
			return strings.TrimSpace(addr), nil
		}
	}
	return "", errors.New("orderlog dev exited before printing its gRPC address")
}

// Median is the middle of xs (the upper one of an even count).
func Median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
