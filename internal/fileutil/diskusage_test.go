package fileutil

import (
	"errors"
	"testing"
)

// The file system holding a test directory reports a consistent usage:
// something used, nothing beyond the total.
func TestStatDiskReportsAConsistentUsage(t *testing.T) {
	u, err := StatDisk(t.TempDir())
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("StatDisk: %v", err)
	}
	if u.Total == 0 || u.Used > u.Total || u.Avail > u.Total {
		t.Fatalf("usage %+v is inconsistent", u)
	}
	if f := u.UsedFraction(); f < 0 || f > 1 {
		t.Fatalf("used fraction %v of %+v", f, u)
	}
}

func TestStatDiskOfAMissingPathFails(t *testing.T) {
	if _, err := StatDisk(t.TempDir() + "/missing"); err == nil {
		t.Fatal("StatDisk of a missing path succeeded")
	}
}

func TestUsedFractionIsDfsUsePercent(t *testing.T) {
	for _, c := range []struct {
		u    DiskUsage
		want float64
	}{
		{DiskUsage{}, 0},
		{DiskUsage{Total: 100, Used: 45, Avail: 45}, 0.5}, // 10 reserved for root
		{DiskUsage{Total: 100, Used: 100}, 1},
	} {
		if got := c.u.UsedFraction(); got != c.want {
			t.Errorf("%+v: UsedFraction %v, want %v", c.u, got, c.want)
		}
	}
}
