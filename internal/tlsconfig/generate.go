package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Validity of what NewCA and Issue make.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 365 * 24 * time.Hour
)

// CA is a certificate authority with its key: ECDSA P-256.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA named name, valid from now.
func NewCA(name string, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"orderlog"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Issue makes a node certificate for name and hosts (DNS names or IP
// addresses, its SANs), usable by a server and by a client, valid from
// now for CertValidity. It returns the certificate and its key in PEM.
func (ca *CA) Issue(name string, hosts []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	return ca.issue(name, hosts, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, now)
}

// IssueClient makes a client certificate for name: usable by a client
// only, so that a node does not take it for another node's.
func (ca *CA) IssueClient(name string, now time.Time) (certPEM, keyPEM []byte, err error) {
	return ca.issue(name, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, now)
}

func (ca *CA) issue(name string, hosts []string, usages []x509.ExtKeyUsage, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	template := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"orderlog"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(CertValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			template.IPAddresses = append(template.IPAddresses, ip)
		} else {
			template.DNSNames = append(template.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// CertPEM is the CA's certificate in PEM (the CA file peers trust).
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM is the CA's key in PEM.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// serial is a random 128-bit serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// Dev is the files `orderlog dev --tls` keeps in its data directory: a
// local CA, a certificate for the node and one for clients.
type Dev struct {
	Dir                   string
	CA, CAKey             string
	NodeCert, NodeKey     string
	ClientCert, ClientKey string
}

// DevFiles names the files under dir.
func DevFiles(dir string) Dev {
	at := func(name string) string { return filepath.Join(dir, name) }
	return Dev{Dir: dir, CA: at("ca.pem"), CAKey: at("ca-key.pem"), NodeCert: at("node.pem"), NodeKey: at("node-key.pem"),
		ClientCert: at("client.pem"), ClientKey: at("client-key.pem")}
}

// Node is the node's configuration.
func (d Dev) Node() Config { return Config{CertFile: d.NodeCert, KeyFile: d.NodeKey, CAFile: d.CA} }

// Client is a client's configuration.
func (d Dev) Client() Config {
	return Config{CertFile: d.ClientCert, KeyFile: d.ClientKey, CAFile: d.CA}
}

// renewBefore is how long before it expires a dev certificate is made
// again.
const renewBefore = 30 * 24 * time.Hour

// EnsureDev makes, or reuses, the dev files under dir: the CA when
// missing, the node certificate when missing, not issued by that CA,
// expiring within 30 days or not naming every one of hosts, and the client
// certificate likewise. created lists the files written.
func EnsureDev(dir string, hosts []string, now time.Time) (d Dev, created []string, err error) {
	d = DevFiles(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return d, nil, err
	}
	ca, fresh, err := ensureCA(d, now)
	if err != nil {
		return d, nil, err
	}
	if fresh {
		created = append(created, d.CA, d.CAKey)
	}
	for _, leaf := range []struct {
		name, cert, key string
		hosts           []string
	}{{"orderlog node", d.NodeCert, d.NodeKey, hosts}, {"orderlog client", d.ClientCert, d.ClientKey, nil}} {
		if !fresh && reusable(leaf.cert, leaf.key, ca, leaf.hosts, now) {
			continue
		}
		issue := ca.Issue
		if leaf.cert == d.ClientCert {
			issue = func(name string, _ []string, now time.Time) ([]byte, []byte, error) { return ca.IssueClient(name, now) }
		}
		certPEM, keyPEM, err := issue(leaf.name, leaf.hosts, now)
		if err != nil {
			return d, nil, err
		}
		if err := writeFiles(leaf.cert, certPEM, leaf.key, keyPEM); err != nil {
			return d, nil, err
		}
		created = append(created, leaf.cert, leaf.key)
	}
	return d, created, nil
}

// ensureCA loads the dev CA, or makes one when there is none.
func ensureCA(d Dev, now time.Time) (ca *CA, fresh bool, err error) {
	ca, err = loadCA(d.CA, d.CAKey)
	if err == nil {
		return ca, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("tlsconfig: dev CA in %s: %w (remove the directory to make a new one)", d.Dir, err)
	}
	if ca, err = NewCA("orderlog dev CA", now); err != nil {
		return nil, false, err
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, false, err
	}
	return ca, true, writeFiles(d.CA, ca.CertPEM(), d.CAKey, keyPEM)
}

func loadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	certBlock, _ := pem.Decode(certPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if certBlock == nil || keyBlock == nil {
		return nil, errors.New("not PEM")
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// reusable says whether the certificate in certFile (with its key) was
// issued by ca, is valid for another renewBefore at least and names
// every host.
func reusable(certFile, keyFile string, ca *CA, hosts []string, now time.Time) bool {
	src, err := Load(Config{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		return false
	}
	leaf := src.Certificate()
	if leaf.CheckSignatureFrom(ca.Cert) != nil || now.Add(renewBefore).After(leaf.NotAfter) {
		return false
	}
	return !slices.ContainsFunc(hosts, func(h string) bool { return leaf.VerifyHostname(h) != nil })
}

// writeFiles writes a certificate (0644) and its key (0600), each through
// a temporary file renamed over the old one.
func writeFiles(certFile string, certPEM []byte, keyFile string, keyPEM []byte) error {
	if err := writeAtomic(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return writeAtomic(certFile, certPEM, 0o644)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
