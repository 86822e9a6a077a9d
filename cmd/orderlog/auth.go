package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"orderlog/client"
	"orderlog/internal/auth"
	"orderlog/internal/tlsconfig"
	"orderlog/proto/orderlogpb"
)

const authUsage = `auth token create --principal P [--admin] [--description D]
       orderlog auth token revoke ID
       orderlog auth token ls
       orderlog auth acl add|rm --principal P --topic T --operation produce|read|admin
       orderlog auth acl ls
       orderlog auth quota set --principal P [--produce-bytes N] [--read-bytes N]
       orderlog auth quota ls

Manages who may do what (docs/security.md). Authentication is on once any
token or ACL exists: every call then needs a token (--token, or the
ORDERLOG_TOKEN environment variable) or a client certificate. Make the
first administrator with "token create --principal admin --admin" (admin
on every topic, in one step; until then anyone who reaches the port may
call these). A token's secret is printed once; only its hash is kept.
--topic takes a name, a prefix ending in '*', or '*'; --principal takes a
name or '*' (everyone authenticated). A quota bounds a principal's bytes
per second on each node (0: no bound; principal '*': everyone without
one).`

func runAuth(args []string) error {
	fs := newFlagSet("auth", authUsage)
	var cf clientFlags
	cf.register(fs)
	principal := fs.String("principal", "", "the principal (a name; '*' for ACLs and quotas: everyone)")
	admin := fs.Bool("admin", false, "with token create: also admin on every topic")
	description := fs.String("description", "", "with token create: what the token is for")
	topic := fs.String("topic", "", "with acl: a topic, a prefix ending in '*', or '*'")
	operation := fs.String("operation", "", "with acl: produce, read or admin")
	etcd := fs.String("etcd", "", "with token create: write the token straight into the cluster's etcd (`host:port,...`; "+
		"with --tls-ca/--tls-cert/--tls-key over TLS) instead of asking a node: the way to make the first administrator "+
		"of a cluster started with --auth required")
	produceBytes := fs.Int64("produce-bytes", 0, "with quota set: produce bytes per second (0: no bound)")
	readBytes := fs.Int64("read-bytes", 0, "with quota set: read bytes per second (0: no bound)")
	var words []string // the object, the verb and an id come first; flags may follow
	rest := args
	for len(rest) > 0 && !strings.HasPrefix(rest[0], "-") && len(words) < 3 {
		words, rest = append(words, rest[0]), rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	words = append(words, fs.Args()...)
	if len(words) < 2 {
		fs.Usage()
		return errors.New("auth: say what: token, acl or quota, and a verb")
	}
	object, verb, operands := words[0], words[1], words[2:]
	if *etcd != "" {
		if object+" "+verb != "token create" {
			return errors.New("auth: --etcd is for token create only")
		}
		return createTokenInEtcd(*etcd, &cf, *principal, *description, *admin)
	}
	return cf.withClient(func(ctx context.Context, cl *client.Client) error {
		a := cl.Auth()
		switch object + " " + verb {
		case "token create":
			resp, err := a.CreateToken(ctx, *principal, *description, *admin)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "token %s for %s (shown once; keep it secret)\n", resp.Token.Id, resp.Token.Principal)
			fmt.Println(resp.Secret)
			return nil
		case "token revoke":
			if len(operands) != 1 {
				return errors.New("auth token revoke: give the token's id (auth token ls)")
			}
			ok, err := a.RevokeToken(ctx, operands[0])
			if err == nil && !ok {
				err = fmt.Errorf("no token %s", operands[0])
			}
			return err
		case "token ls":
			tokens, err := a.ListTokens(ctx)
			if err != nil {
				return err
			}
			slices.SortFunc(tokens, func(x, y *orderlogpb.TokenInfo) int { return strings.Compare(x.Principal+x.Id, y.Principal+y.Id) })
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPRINCIPAL\tCREATED\tDESCRIPTION")
			for _, t := range tokens {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Id, t.Principal, time.UnixMicro(t.CreatedUs).UTC().Format(time.RFC3339), t.Description)
			}
			return tw.Flush()
		case "acl add", "acl rm":
			e := &orderlogpb.AclEntry{Principal: *principal, Topic: *topic, Operation: *operation}
			if verb == "add" {
				return a.AddACL(ctx, e)
			}
			ok, err := a.RemoveACL(ctx, e)
			if err == nil && !ok {
				err = errors.New("no such ACL entry")
			}
			return err
		case "acl ls":
			entries, err := a.ListACLs(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PRINCIPAL\tTOPIC\tOPERATION")
			for _, e := range entries {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Principal, e.Topic, e.Operation)
			}
			return tw.Flush()
		case "quota set":
			return a.SetQuota(ctx, &orderlogpb.Quota{Principal: *principal, ProduceBytesPerSec: *produceBytes, ReadBytesPerSec: *readBytes})
		case "quota ls":
			quotas, err := a.ListQuotas(ctx)
			if err != nil {
				return err
			}
			slices.SortFunc(quotas, func(x, y *orderlogpb.Quota) int { return strings.Compare(x.Principal, y.Principal) })
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PRINCIPAL\tPRODUCE_BYTES_PER_SEC\tREAD_BYTES_PER_SEC")
			for _, q := range quotas {
				fmt.Fprintf(tw, "%s\t%d\t%d\n", q.Principal, q.ProduceBytesPerSec, q.ReadBytesPerSec)
			}
			return tw.Flush()
		}
		return fmt.Errorf("auth: unknown %q: see orderlog auth --help", object+" "+verb)
	})
}

// createTokenInEtcd makes a token by writing etcd directly: whoever can
// write etcd can grant anything anyway, and a cluster with --auth
// required has no other way to its first administrator.
func createTokenInEtcd(endpoints string, cf *clientFlags, principal, description string, admin bool) error {
	cfg := clientv3.Config{Endpoints: strings.Split(endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if cf.files.Enabled() {
		source, err := tlsconfig.Load(cf.files)
		if err != nil {
			return err
		}
		cfg.TLS = source.ClientConfig()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", endpoints, err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, secret, err := auth.NewStore(cli).CreateToken(ctx, principal, description, admin)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "token %s for %s (shown once; keep it secret)\n", rec.ID, rec.Principal)
	fmt.Println(secret)
	return nil
}
