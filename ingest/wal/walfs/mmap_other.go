//go:build !unix

package walfs

import "os"

func mapFile(*os.File, int64) (Mapping, error) { return nil, ErrNoMapping }
