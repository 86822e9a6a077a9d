package tlsconfig

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Source holds a process's current TLS material and reloads it from its
// files. Every tls.Config it builds reads the current generation at each
// handshake, so a reload reaches new connections without a restart;
// established connections keep the certificate they were made with.
type Source struct {
	cfg     Config
	current atomic.Pointer[material]
	// reloads serializes Reload; failed describes the last reload's
	// failure ("" after a success), so that Watch reports a failure once.
	reloads struct {
		sync.Mutex
		failed string
	}
}

// material is one loaded generation of the files.
type material struct {
	cert *tls.Certificate  // nil: a client without a certificate
	leaf *x509.Certificate // cert's first certificate, parsed
	// roots verifies peers; nil: the system's roots (and servers do not
	// ask clients for certificates).
	roots  *x509.CertPool
	digest [sha256.Size]byte // of the files' contents
}

// Load reads cfg's files. It fails when a file cannot be read or parsed,
// or the key does not match the certificate.
func Load(cfg Config) (*Source, error) {
	if err := cfg.ValidateClient(); err != nil {
		return nil, err
	}
	contents, digest, err := cfg.read()
	if err != nil {
		return nil, err
	}
	m, err := parse(cfg, contents, digest)
	if err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg}
	s.current.Store(m)
	return s, nil
}

// Config is the files the source reads.
func (s *Source) Config() Config { return s.cfg }

// Certificate is the leaf of the current certificate (nil without one).
func (s *Source) Certificate() *x509.Certificate { return s.current.Load().leaf }

// HasCA says whether the source verifies peers against its own CA.
func (s *Source) HasCA() bool { return s.current.Load().roots != nil }

// Reload reads the files again and, when they changed and parse, makes
// them the current generation. changed is false when the files hold what
// is loaded already; on an error the current generation stays.
func (s *Source) Reload() (changed bool, err error) {
	changed, err, _ = s.reload()
	return changed, err
}

// reload is Reload; repeated says that the same failure (the same read
// error, or the same contents failing to parse) ended the last reload too.
func (s *Source) reload() (changed bool, err error, repeated bool) {
	s.reloads.Lock()
	defer s.reloads.Unlock()
	contents, digest, err := s.cfg.read()
	if err == nil && digest == s.current.Load().digest {
		s.reloads.failed = ""
		return false, nil, false
	}
	var m *material
	if err == nil {
		m, err = parse(s.cfg, contents, digest)
	}
	if err != nil {
		failure := fmt.Sprintf("%x %v", digest, err)
		repeated, s.reloads.failed = failure == s.reloads.failed, failure
		return false, err, repeated
	}
	s.reloads.failed = ""
	s.current.Store(m)
	return true, nil, false
}

// Watch reloads the files every interval until ctx ends, and tells
// report of each new generation loaded (err nil) and of each failure,
// once: a certificate written before its key fails until the key is
// there, and is reported once.
func (s *Source) Watch(ctx context.Context, every time.Duration, report func(leaf *x509.Certificate, err error)) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		switch changed, err, repeated := s.reload(); {
		case changed:
			report(s.Certificate(), nil)
		case err != nil && !repeated:
			report(nil, err)
		}
	}
}

// files are the contents of the three files, in Config order.
type files struct{ cert, key, ca []byte }

// read reads the files and digests them together.
func (c Config) read() (files, [sha256.Size]byte, error) {
	var f files
	var err error
	for _, r := range []struct {
		path string
		into *[]byte
	}{{c.CertFile, &f.cert}, {c.KeyFile, &f.key}, {c.CAFile, &f.ca}} {
		if r.path == "" {
			continue
		}
		if *r.into, err = os.ReadFile(r.path); err != nil {
			return files{}, [sha256.Size]byte{}, fmt.Errorf("tlsconfig: %w", err)
		}
	}
	h := sha256.New()
	for _, b := range [][]byte{f.cert, f.key, f.ca} {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var digest [sha256.Size]byte
	h.Sum(digest[:0])
	return f, digest, nil
}

// parse turns the files' contents into a generation.
func parse(cfg Config, f files, digest [sha256.Size]byte) (*material, error) {
	m := &material{digest: digest}
	if cfg.CertFile != "" {
		cert, err := tls.X509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("tlsconfig: certificate %s with key %s: %w", cfg.CertFile, cfg.KeyFile, err)
		}
		m.cert, m.leaf = &cert, cert.Leaf
	}
	if cfg.CAFile != "" {
		m.roots = x509.NewCertPool()
		if !m.roots.AppendCertsFromPEM(f.ca) {
			return nil, fmt.Errorf("tlsconfig: CA file %s holds no PEM certificate", cfg.CAFile)
		}
	}
	return m, nil
}
