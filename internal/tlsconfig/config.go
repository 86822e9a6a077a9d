package tlsconfig

import (
	"errors"
)

// Config names the PEM files of a process's TLS identity.
type Config struct {
	// CertFile is this process's certificate (with any intermediates
	// after it) and KeyFile its private key. A node presents the same
	// certificate as a server and, to other nodes and etcd, as a client,
	// so a node certificate needs both the server and the client
	// extended key usage and names (SANs) for every address it is
	// reached at.
	CertFile, KeyFile string
	// CAFile holds the certificates of the authorities that peers'
	// certificates must chain to; empty: the system's roots verify
	// servers, and client certificates are not asked for.
	CAFile string
}

// Enabled says whether any TLS file is named.
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

// ErrIncomplete is returned by ValidateServer when a server is given only
// some of its TLS files.
var ErrIncomplete = errors.New("tlsconfig: a server needs a certificate, its key and a CA (--tls-cert, --tls-key, --tls-ca)")

// ValidateServer checks the files of a node: all three or none. A node
// serves clients and other nodes on one port, and verifies the nodes that
// call it, so it cannot go without a CA.
func (c Config) ValidateServer() error {
	if c.Enabled() && (c.CertFile == "" || c.KeyFile == "" || c.CAFile == "") {
		return ErrIncomplete
	}
	return nil
}

// ValidateClient checks the files of a client: a certificate and its key
// come together; the CA is optional (the system's roots without it).
func (c Config) ValidateClient() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("tlsconfig: a client certificate needs its key, and a key its certificate (--tls-cert, --tls-key)")
	}
	return nil
}
