package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/store"
)

func init() {
	register(command{name: "keys", summary: "create, list and revoke API keys (offline, on the data folder)", run: runKeys})
}

const keysUsage = `Usage:
  gate keys create --data DIR --role admin|agent|worker --principal NAME [--tenant T]
  gate keys list   --data DIR [--json]
  gate keys revoke --data DIR KEY_ID

create prints the new key on stdout; it is stored only as a sha256 hash.
A worker key's principal is its worker id ({type}.{instance}).
`

// keysSubs are gate keys' commands and what each does.
var keysSubs = map[string]string{
	"create": "create an API key and print it (once) on stdout",
	"list":   "list the API keys (never the keys themselves)",
	"revoke": "revoke an API key by its id",
}

func runKeys(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, keysUsage)
		return 2
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, keysUsage)
		return 0
	}
	summary, known := keysSubs[sub]
	if !known {
		fmt.Fprintf(stderr, "gate keys: unknown command %q\n\n%s", sub, keysUsage)
		return 2
	}
	fs := flag.NewFlagSet("gate keys "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "./gate-data", "data folder")
	db := fs.String("db", "", "database URL (empty: SQLite in the data folder)")
	var role, principal, tenant *string
	var asJSON *bool
	usageArgs := "[flags]"
	switch sub {
	case "create":
		role = fs.String("role", "", "admin, agent or worker")
		principal = fs.String("principal", "", "agent name or worker id ({type}.{instance})")
		tenant = fs.String("tenant", auth.DefaultTenant, "tenant")
		usageArgs = "--role ROLE --principal NAME [flags]"
	case "list":
		asJSON = fs.Bool("json", false, "print JSON")
	case "revoke":
		usageArgs = "[flags] KEY_ID"
	}
	// Help (exit 0) and a flag error's usage (exit 2) go to stderr, as
	// every remote command's -h does.
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: gate keys %s %s\n\n%s (offline, on the data folder or database).\n\nFlags:\n", sub, usageArgs, summary)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		usage(stderr)
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if sub == "create" {
		// The flags' values are checked before the data folder is opened:
		// a value the gate would refuse is bad usage, as for every command.
		if err := auth.CheckNewKey(auth.NewKeyRequest{Role: *role, Principal: *principal, Tenant: *tenant}); err != nil {
			fmt.Fprintln(stderr, "gate keys create:", err)
			usage(stderr)
			return 2
		}
	}
	st, _, err := openStore(context.Background(), *data, *db, openAsIs) // never creates a gate, never migrates
	if err != nil {
		fmt.Fprintln(stderr, "gate keys:", err)
		return 1
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch sub {
	case "create":
		if fs.NArg() > 0 {
			fmt.Fprint(stderr, keysUsage)
			return 2
		}
		k, err := auth.CreateKey(ctx, st, auth.NewKeyRequest{Role: *role, Principal: *principal, Tenant: *tenant})
		if err != nil {
			fmt.Fprintln(stderr, "gate keys create:", err)
			return 1
		}
		fmt.Fprintln(stdout, k.APIKey)
		fmt.Fprintf(stderr, "created key %s (%s %s in tenant %s); it is shown only this once\n", k.ID, k.Role, k.Principal, k.Tenant)
		return 0
	case "list":
		ks, err := auth.ListKeys(ctx, st)
		if err != nil {
			fmt.Fprintln(stderr, "gate keys list:", err)
			return 1
		}
		return printKeys(stdout, ks, *asJSON)
	case "revoke":
		if fs.NArg() != 1 {
			fmt.Fprint(stderr, keysUsage)
			return 2
		}
		if err := auth.RevokeKey(ctx, st, fs.Arg(0)); err != nil {
			fmt.Fprintln(stderr, "gate keys revoke:", err)
			return 1
		}
		fmt.Fprintf(stdout, "revoked %s\n", fs.Arg(0))
		return 0
	}
	fmt.Fprint(stderr, keysUsage)
	return 2
}

func printKeys(w io.Writer, ks []store.Key, asJSON bool) int {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(ks); err != nil {
			return 1
		}
		return 0
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY ID\tPREFIX\tROLE\tTENANT\tPRINCIPAL\tCREATED\tREVOKED")
	for _, k := range ks {
		rev := "-"
		if k.RevokedAt != nil {
			rev = k.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s…\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.Role, k.Tenant, k.Principal, k.CreatedAt.Format(time.RFC3339), rev)
	}
	tw.Flush()
	return 0
}
