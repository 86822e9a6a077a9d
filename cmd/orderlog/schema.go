package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

const schemaUsage = `schema register --subject S [--type avro|json|protobuf] --file F
       orderlog schema ls [--subject S]
       orderlog schema show --subject S [--version N] | --id N
       orderlog schema check --subject S [--type T] --file F [--version N]
       orderlog schema config [--subject S] [--compatibility L] [--validation none|warn|strict]

Manages the schema registry (docs/schemas.md) over gRPC. A subject is
named like the topic whose messages it describes. register adds the
schema in --file ('-': stdin) as the subject's next version, or prints the
version it already is; one the subject's compatibility level refuses
fails with INCOMPATIBLE_SCHEMA and the reason. ls lists the subjects, or
with --subject its versions; show prints a version (default: the latest)
or the schema with a global id. check says whether --file could be
registered, against --version alone or, without it, every version the
level looks at, and exits 3 with the reason when it could not (1 when
the check itself failed: no node, no permission, bad input). config
prints the subject's compatibility level (its own, else the global one)
and its topic's validation mode, after setting the ones given; without
--subject, the global level. Once authentication is on, register and
setting a config need admin on the subject's topic, the others read.`

// schemaFlags are the flags of the schema verbs.
type schemaFlags struct {
	subject       string
	format        string
	file          string
	version       int64
	id            uint64
	compatibility string
	validation    string
	json          bool
	text          string // read from file before the call
}

func (f *schemaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.subject, "subject", "", "the subject (named like its topic)")
	fs.StringVar(&f.format, "type", "avro", "with register and check: the schema's format: avro, json (JSON Schema) or protobuf")
	fs.StringVar(&f.file, "file", "", "with register and check: the file holding the schema text ('-': stdin)")
	fs.Int64Var(&f.version, "version", 0, "with show: the version (0 or -1: the latest); with check: the one version to check against (-1: the latest; 0: every version the level looks at)")
	fs.Uint64Var(&f.id, "id", 0, "with show: a global schema id instead of --subject")
	fs.StringVar(&f.compatibility, "compatibility", "", "with config: set the compatibility level (NONE, BACKWARD, FORWARD, FULL, or a _TRANSITIVE form)")
	fs.StringVar(&f.validation, "validation", "", "with config: set what produce checks of the topic: none, warn or strict")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of text")
}

// schemaVerb runs one verb; need says which flags it needs.
type schemaVerb struct {
	needSubject, needFile bool
	run                   func(ctx context.Context, reg client.SchemaRegistry, f *schemaFlags, w io.Writer) error
}

var schemaVerbs = map[string]schemaVerb{
	"register": {true, true, schemaRegister},
	"ls":       {false, false, schemaList},
	"show":     {false, false, schemaShow},
	"check":    {true, true, schemaCheck},
	"config":   {false, false, schemaConfig},
}

func runSchema(args []string) error {
	fs := newFlagSet("schema", schemaUsage)
	var cf clientFlags
	cf.register(fs)
	var f schemaFlags
	f.register(fs)
	verb, rest := "", args // the verb comes first; flags follow it
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		verb, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	v, ok := schemaVerbs[verb]
	switch {
	case verb == "":
		fs.Usage()
		return errors.New("schema: a verb is required: register, ls, show, check or config")
	case !ok:
		return fmt.Errorf("schema: unknown verb %q: use register, ls, show, check or config", verb)
	case fs.NArg() > 0:
		return fmt.Errorf("schema %s: unexpected %q: flags name everything (--subject, --file)", verb, fs.Arg(0))
	}
	if err := f.check(verb, v); err != nil {
		return err
	}
	return cf.withClient(func(ctx context.Context, cl *client.Client) error {
		return v.run(ctx, cl.Schemas(), &f, os.Stdout)
	})
}

// check refuses missing flags and reads --file, before anything is dialled.
func (f *schemaFlags) check(verb string, v schemaVerb) error {
	if v.needSubject && f.subject == "" {
		return fmt.Errorf("schema %s: --subject is required", verb)
	}
	if verb == "show" && (f.subject == "") == (f.id == 0) {
		return errors.New("schema show: give --subject (with --version) or --id")
	}
	if f.id > math.MaxUint32 || f.version < -1 || f.version > math.MaxInt32 {
		return fmt.Errorf("schema %s: --id must fit 32 bits and --version be -1 to %d", verb, math.MaxInt32)
	}
	if !v.needFile {
		return nil
	}
	if f.file == "" {
		return fmt.Errorf("schema %s: --file is required ('-' reads stdin)", verb)
	}
	var raw []byte
	var err error
	if f.file == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(f.file)
	}
	if err != nil {
		return fmt.Errorf("schema %s: %w", verb, err)
	}
	f.text = string(raw)
	return nil
}

// schemaJSON is a version as --json prints it, in the REST API's names.
type schemaJSON struct {
	Subject    string `json:"subject,omitempty"`
	Version    int32  `json:"version,omitempty"`
	ID         uint32 `json:"id"`
	SchemaType string `json:"schemaType"`
	Schema     string `json:"schema,omitempty"`
}

func toSchemaJSON(v *orderlogpb.SchemaVersion, withText bool) schemaJSON {
	out := schemaJSON{Subject: v.Subject, Version: v.Version, ID: v.Id, SchemaType: v.Format}
	if withText {
		out.Schema = v.Text
	}
	return out
}

func printJSON(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

func schemaRegister(ctx context.Context, reg client.SchemaRegistry, f *schemaFlags, w io.Writer) error {
	v, err := reg.Register(ctx, f.subject, f.format, f.text)
	if err != nil {
		return err
	}
	if f.json {
		return printJSON(w, toSchemaJSON(v, false))
	}
	_, err = fmt.Fprintf(w, "subject %s version %d: schema id %d (%s)\n", v.Subject, v.Version, v.Id, v.Format)
	return err
}

func schemaList(ctx context.Context, reg client.SchemaRegistry, f *schemaFlags, w io.Writer) error {
	if f.subject == "" {
		subjects, err := reg.Subjects(ctx)
		switch {
		case err != nil:
			return err
		case f.json:
			return printJSON(w, append([]string{}, subjects...))
		}
		_, err = fmt.Fprint(w, strings.Join(append(subjects, ""), "\n"))
		return err
	}
	versions, err := reg.Versions(ctx, f.subject)
	if err != nil {
		return err
	}
	if f.json {
		out := make([]schemaJSON, len(versions))
		for i, v := range versions {
			out[i] = toSchemaJSON(v, true)
		}
		return printJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tID\tTYPE")
	for _, v := range versions {
		fmt.Fprintf(tw, "%d\t%d\t%s\n", v.Version, v.Id, v.Format)
	}
	return tw.Flush()
}

func schemaShow(ctx context.Context, reg client.SchemaRegistry, f *schemaFlags, w io.Writer) error {
	var v *orderlogpb.SchemaVersion
	var err error
	if f.id != 0 {
		v, err = reg.ByID(ctx, uint32(f.id))
	} else {
		v, err = reg.Get(ctx, f.subject, int32(f.version))
	}
	if err != nil {
		return err
	}
	if f.json {
		return printJSON(w, toSchemaJSON(v, true))
	}
	header := fmt.Sprintf("schema id %d (%s)", v.Id, v.Format)
	if v.Subject != "" {
		header = fmt.Sprintf("subject %s version %d: %s", v.Subject, v.Version, header)
	}
	_, err = fmt.Fprintf(w, "%s\n%s\n", header, strings.TrimRight(v.Text, "\n"))
	return err
}

// errIncompatible ends check with exit status 3 once the reasons are
// printed, so a CI step tells "incompatible" from "could not check".
var errIncompatible = exitError{code: 3, err: errors.New("the schema is not compatible")}

func schemaCheck(ctx context.Context, reg client.SchemaRegistry, f *schemaFlags, w io.Writer) error {
	resp, err := reg.Check(ctx, f.subject, int32(f.version), f.format, f.text)
	if err != nil {
		return err
	}
	if f.json {
		if err := printJSON(w, map[string]any{"compatible": resp.Compatible, "messages": resp.Messages}); err != nil {
			return err
		}
	} else if resp.Compatible {
		fmt.Fprintf(w, "compatible with subject %s (%s)\n", f.subject, checkedAgainst(int(f.version)))
	}
	if resp.Compatible {
		return nil
	}
	for _, m := range resp.Messages {
		if !f.json {
			fmt.Fprintf(w, "incompatible: %s\n", m)
		}
	}
	return errIncompatible
}

func checkedAgainst(version int) string {
	switch version {
	case 0:
		return "every version its level looks at"
	case -1:
		return "the latest version"
	}
	return fmt.Sprintf("version %d", version)
}

func schemaConfig(ctx context.Context, reg client.SchemaRegistry, f *schemaFlags, w io.Writer) error {
	var cfg *orderlogpb.SchemaConfig
	var err error
	if f.compatibility == "" && f.validation == "" {
		cfg, err = reg.Config(ctx, f.subject)
	} else {
		cfg, err = reg.SetConfig(ctx, &orderlogpb.SchemaConfig{Subject: f.subject, Compatibility: f.compatibility, Validation: f.validation})
	}
	if err != nil {
		return err
	}
	if f.json {
		return printJSON(w, map[string]string{"subject": cfg.Subject, "compatibility": cfg.Compatibility, "validation": cfg.Validation})
	}
	if cfg.Subject == "" {
		_, err = fmt.Fprintf(w, "global: compatibility %s\n", cfg.Compatibility)
		return err
	}
	_, err = fmt.Fprintf(w, "subject %s: compatibility %s, validation %s\n", cfg.Subject, cfg.Compatibility, cfg.Validation)
	return err
}
