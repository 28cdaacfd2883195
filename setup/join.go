package setup

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
	"meshd/host/tunnel"
	"meshd/pki"
	"meshd/report"
	"meshd/wg"
)

// JoinOptions are `meshd join`'s inputs.
type JoinOptions struct {
	Token   string
	Name    string
	DataDir string
	// Advertise is this node's underlay address; empty means the address the server sees.
	Advertise string
	// SealKey is the seal key file (empty: MESHD_SEAL_KEY, else /etc/meshd/seal.key); one already
	// there is used, otherwise a new key is made.
	SealKey string
	// Ports are `--port KEY=N` as given: KEY is a port of the mesh module a client binds (bus,
	// gossip, tunnel, or mesh.SETTING). They become the node's settings in the record.
	Ports map[string]string
	// DockerHost is the Docker engine the preflight asks for published ports.
	DockerHost string
	// DryRun runs the preflight and stops: nothing is sent, nothing written. It needs no token:
	// without one, Preview says what a token would (its mode, a server's or not); a token given
	// is read for those and its form, and is never presented, so it stays unused.
	DryRun bool
	// Preview is the token a dry run without one previews the join of: Mode and Server only.
	Preview pki.TokenPayload
	// Tunnel names the machine's found WireGuard interface (a predecessor's tunnel): its public
	// key is presented, so the machine keeps the address the tunnel had for it.
	Tunnel string
}

// JoinResult says what joining made.
type JoinResult struct {
	Node        *fsm.Node        `json:"node,omitempty"`
	DataDir     string           `json:"data_dir"`
	Servers     []string         `json:"servers"`
	Declaration *fsm.Declaration `json:"declaration"`
	SealKey     string           `json:"seal_key"`
	// RecoveryCode restores a lost seal key file; set only when join made the key.
	RecoveryCode string `json:"recovery_code,omitempty"`
	// Mode is the token's: the joining node's mode.
	Mode fsm.Mode `json:"mode"`
	// Findings are the preflight's (warnings only, when the join went ahead).
	Findings []api.Finding `json:"findings"`
	DryRun   bool          `json:"dry_run,omitempty"`
	// Settings are the node's settings the enrolment would send (a dry run's preview).
	Settings map[string]string `json:"settings,omitempty"`
	// Tunnel is the found interface taken over (or presented) beside what the mesh raises in
	// its place, field by field (TunnelPreview); empty without a found tunnel.
	Tunnel []report.TunnelField `json:"tunnel,omitempty"`
	// Resumed says this join sent again the keys of an earlier one whose answer was lost, and
	// got that enrolment's answer.
	Resumed bool `json:"resumed,omitempty"`
}

// JoinError is a join refused before anything was written: by the token's form, by the server,
// or because no server could be reached.
type JoinError struct{ Err error }

func (e *JoinError) Error() string { return "join refused: " + e.Err.Error() }
func (e *JoinError) Unwrap() error { return e.Err }

// Join enrols this machine as a client node with a token: it checks the token's form, runs the
// preflight genesis runs (for the ports a client binds, and the token's mode: a converged join
// refuses a machine in use), reaches a server's bus trusting only the CA the token names, checks
// the token's signature with that CA, enrols (answered only once the record committed the node,
// with its --port values as its settings and its WireGuard public key), and only then writes the
// data dir: the node file, its sealed identity key, its certificate, the CA's, the sealed gossip
// keyring, and (joining without --tunnel) its sealed WireGuard private key, made here so that
// only its public half ever leaves the machine. A refused join
// writes nothing, and a join refused by its preflight sends nothing: its token stays unused.
// A dry run stops after the preflight, before anything is sent; it needs no token (joinToken).
// It stays one body because the order of those steps is the promise.
func Join(ctx context.Context, opts JoinOptions) (*JoinResult, error) {
	if opts.Name == "" {
		return nil, errors.New("join needs the node's name (--name)")
	}
	if _, err := os.Stat(filepath.Join(opts.DataDir, NodeFileName)); err == nil {
		n, _ := ReadNodeFile(opts.DataDir)
		if n != nil {
			return nil, fmt.Errorf("%s already holds node %s (id %s); a machine joins once", opts.DataDir, n.Name, n.ID)
		}
		return nil, fmt.Errorf("%s already holds a node", opts.DataDir)
	}
	p, err := joinToken(opts)
	if err != nil {
		return nil, err
	}
	settings, findings, err := joinPreflight(ctx, opts, p)
	if err != nil {
		return nil, err
	}
	var preview []report.TunnelField
	if opts.Tunnel != "" {
		if preview, err = TunnelPreview(opts.Tunnel); err != nil {
			return nil, fmt.Errorf("--tunnel %s: %w", opts.Tunnel, err)
		}
	}
	if opts.DryRun {
		return &JoinResult{DataDir: opts.DataDir, Servers: p.Bus, Mode: fsm.Mode(p.Mode), Findings: findings, DryRun: true,
			Tunnel: preview, Settings: settings}, nil
	}
	sealPath := pki.SealKeyPath(opts.SealKey)
	seal, newSeal, err := sealKeyFor(sealPath)
	if err != nil {
		return nil, err
	}
	done, err := writeNewSealKey(seal, newSeal)
	if err != nil {
		return nil, err
	}
	defer done(false)
	// A join whose answer was lost left its keys sealed in the data dir: the same join again
	// (same token, same name) sends the same key, ID and overlay key, and the server answers it
	// as it answered the first time.
	pend, err := readJoinPending(opts.DataDir, seal)
	if err != nil {
		return nil, err
	}
	if pend != nil && (pend.TokenHash != pki.TokenHash(opts.Token) || pend.Name != opts.Name) {
		return nil, fmt.Errorf("%s holds the keys of an earlier join of node %s with another token, whose answer never came: run that join again (same token, same --name), or, if that node is to go, remove it (`meshd node remove %s` on a server) and delete %s to start over",
			opts.DataDir, pend.Name, pend.Name, joinPendingPath(opts.DataDir))
	}
	resumed := pend != nil
	if pend == nil {
		if pend, err = newJoinPending(opts, newSeal); err != nil {
			return nil, err
		}
	}
	key := ed25519.PrivateKey(pend.NodeKey)
	pub := key.Public().(ed25519.PublicKey)
	enrol := api.EnrolRequest{Token: opts.Token, Node: opts.Name, ID: pend.ID, PublicKey: pki.PublicKeyString(pub), Advertise: opts.Advertise, Settings: settings,
		Server: p.Server}
	// The node's overlay key: the found tunnel's when it presents one (sealed when its tunnel is
	// taken over), else one made here, whose private half never leaves this machine.
	var overlay *wgtypes.Key
	if opts.Tunnel != "" {
		f, err := wg.Discover(opts.Tunnel, "")
		if err != nil {
			return nil, fmt.Errorf("--tunnel %s: %w", opts.Tunnel, err)
		}
		enrol.WireGuardKey, enrol.FoundTunnel = f.PrivateKey.PublicKey().String(), opts.Tunnel
		// The found tunnel's port as it listens now is the node's tunnel port: a client config
		// without ListenPort (PiVPN's, wg-easy's) listens on a random one, and its takeover
		// keeps it, since the hub knows the peer there.
		key := catalogue.MeshModule + ".tunnel"
		if _, asked := settings[key]; !asked && f.ListenPort != 0 {
			if enrol.Settings == nil {
				enrol.Settings = map[string]string{}
			}
			enrol.Settings[key] = strconv.Itoa(f.ListenPort)
		}
	} else {
		k, err := wgtypes.ParseKey(pend.Overlay)
		if err != nil {
			return nil, fmt.Errorf("the node's WireGuard key in %s: %w", joinPendingPath(opts.DataDir), err)
		}
		overlay, enrol.WireGuardKey = &k, k.PublicKey().String()
	}
	// Signed with the node's key: the proof that this machine holds it, which the same
	// enrolment again needs as much as the first (the key's public half is no secret).
	SignEnrolment(&enrol, key, time.Now())
	body, _ := json.Marshal(enrol)
	createdDir, err := writeJoinPending(opts.DataDir, seal, pend)
	if err != nil {
		return nil, err
	}
	// forget undoes the pending state when no enrolment can have been committed from it.
	forget := func() {
		os.Remove(joinPendingPath(opts.DataDir))
		if createdDir || resumed {
			os.Remove(opts.DataDir) // only when empty: what else is there stays
		}
		if resumed && pend.SealNew {
			os.Remove(sealPath)
		}
	}

	var resp *api.EnrolResponse
	var tried []string
	sent := false
	for _, addr := range p.Bus {
		r, wrote, err := enrolAt(ctx, addr, opts.Token, p.CA, body)
		sent = sent || wrote
		if err == nil {
			resp = r
			break
		}
		var je *JoinError
		if errors.As(err, &je) {
			forget()
			return nil, err // a refusal is final: another server would say the same
		}
		tried = append(tried, err.Error())
	}
	if resp == nil && !sent && !resumed {
		forget()
		return nil, &JoinError{fmt.Errorf("no server of the token answered: %v", tried)}
	}
	if resp == nil {
		done(true) // the seal key stays: it seals the keys the next try sends again
		return nil, fmt.Errorf("node %s: the enrolment was sent but its answer did not come (%v); the server may have enrolled the node: run the same join again (same token, same --name) to get its answer: its keys are kept sealed in %s",
			opts.Name, tried, joinPendingPath(opts.DataDir))
	}
	ca, err := pki.ParseCert([]byte(resp.CACertPEM))
	if err != nil || pki.Fingerprint(ca) != p.CA {
		return nil, fmt.Errorf("node %s was enrolled, but the server sent a CA that is not the token's; nothing written here", opts.Name)
	}
	if _, err := pki.Identity([]byte(resp.CertPEM), []byte(resp.CACertPEM), key); err != nil {
		return nil, fmt.Errorf("node %s was enrolled, but its certificate is wrong (%w); nothing written here", opts.Name, err)
	}
	servers := resp.Servers
	if len(servers) == 0 {
		servers = p.Bus
	}
	var meshCA *pki.CA
	var raftPort uint16
	if resp.Node.Server && resp.Again {
		// The CA key travels in the first answer only, and that one was lost: this node can
		// never hold it, so it cannot be a server. Its kept keys are of no more use.
		forget()
		return nil, fmt.Errorf("node %s was enrolled as a server, but the answer that carried the mesh CA key was lost, and the CA key is never sent twice; nothing written here: remove the node (`meshd node remove %s` on a server), make a new server token (`meshd token create --server`) and join with it",
			opts.Name, opts.Name)
	}
	if resp.Node.Server {
		if meshCA, raftPort, err = joinedServer(resp); err != nil {
			return nil, fmt.Errorf("node %s was enrolled as a server, but %w; nothing written here", opts.Name, err)
		}
	}
	// Enrolled: now, and only now, the data dir.
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("node %s enrolled, but its data dir %s: %w", opts.Name, opts.DataDir, err)
	}
	if err := pki.WriteNodeSecrets(opts.DataDir, seal, &pki.NodeSecrets{NodeKey: key, NodeCertPEM: []byte(resp.CertPEM),
		CACertPEM: []byte(resp.CACertPEM), Keyring: pki.Keyring{Keys: resp.Keyring}, CA: meshCA}); err != nil {
		return nil, fmt.Errorf("node %s enrolled, but: %w", opts.Name, err)
	}
	if overlay != nil {
		keys := tunnel.SealedKey{Path: tunnel.KeyPath(opts.DataDir), Seal: seal}
		if err := keys.Save(*overlay); err != nil {
			return nil, fmt.Errorf("node %s enrolled, but its WireGuard key: %w", opts.Name, err)
		}
	}
	res := &JoinResult{Node: resp.Node, DataDir: opts.DataDir, Servers: servers, Declaration: resp.Declaration.Declaration, SealKey: sealPath, Tunnel: preview,
		Mode: resp.Node.Mode, Findings: findings, Resumed: resumed}
	if newSeal || pend.SealNew {
		res.RecoveryCode = seal.RecoveryCode()
	}
	nf := &NodeFile{Name: resp.Node.Name, ID: resp.Node.ID, Server: resp.Node.Server, Advertise: resp.Node.Advertise, Servers: servers, RaftPort: raftPort}
	if err := WriteNodeFile(opts.DataDir, nf); err != nil {
		return nil, fmt.Errorf("node %s enrolled, but its node file: %w", opts.Name, err)
	}
	os.Remove(joinPendingPath(opts.DataDir))
	done(true)
	return res, nil
}

// joinPending is what a join made before it sent its enrolment, sealed in the data dir until the
// answer is written: the keys a lost answer's retry must send again.
type joinPending struct {
	TokenHash string `json:"token_hash"`
	Name      string `json:"name"`
	ID        string `json:"id"`
	NodeKey   []byte `json:"node_key"`
	// Overlay is the WireGuard private key made here (joining without --tunnel).
	Overlay string `json:"overlay"`
	// SealNew says the seal key was made by this join: its recovery code is shown when the join
	// finishes, and a refused retry removes it again.
	SealNew bool `json:"seal_new,omitempty"`
}

const joinPendingPurpose = "join.pending"

func joinPendingPath(dataDir string) string { return filepath.Join(dataDir, "join.pending") }

func newJoinPending(opts JoinOptions, sealNew bool) (*joinPending, error) {
	key, err := pki.NewNodeKey()
	if err != nil {
		return nil, err
	}
	wk, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return nil, fmt.Errorf("making the node's WireGuard key: %w", err)
	}
	return &joinPending{TokenHash: pki.TokenHash(opts.Token), Name: opts.Name, ID: newID(), NodeKey: key, Overlay: wk.String(), SealNew: sealNew}, nil
}

// readJoinPending reads an earlier join's pending state in dataDir, nil when there is none.
func readJoinPending(dataDir string, seal *pki.SealKey) (*joinPending, error) {
	path := joinPendingPath(dataDir)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	b, err := seal.ReadSealed(path, joinPendingPurpose)
	if err != nil {
		return nil, fmt.Errorf("an earlier join's keys %s: %w (the seal key %s is not the one they were sealed with)", path, err, seal.Path)
	}
	var p joinPending
	if err := json.Unmarshal(b, &p); err != nil || len(p.NodeKey) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("an earlier join's keys %s are unreadable: delete the file to start over", path)
	}
	return &p, nil
}

// writeJoinPending seals p into dataDir (made 0700 if missing; created says it was).
func writeJoinPending(dataDir string, seal *pki.SealKey, p *joinPending) (created bool, err error) {
	if _, err := os.Stat(dataDir); errors.Is(err, os.ErrNotExist) {
		created = true
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return created, fmt.Errorf("data dir %s: %w", dataDir, err)
	}
	b, _ := json.Marshal(p)
	if err := seal.WriteSealed(joinPendingPath(dataDir), joinPendingPurpose, b); err != nil {
		return created, fmt.Errorf("keep the join's keys in %s: %w", joinPendingPath(dataDir), err)
	}
	return created, nil
}

// joinToken reads the token's form and expiry; a dry run without a token previews opts.Preview's
// instead, which must name a mode.
func joinToken(opts JoinOptions) (*pki.TokenPayload, error) {
	if opts.DryRun && opts.Token == "" {
		if m := fsm.Mode(opts.Preview.Mode); m != fsm.Adopted && m != fsm.Converged {
			return nil, errors.New("join --dry-run without a token previews the join of a token's mode: say which, --adopted or --converged (and --server for a server's)")
		}
		return &opts.Preview, nil
	}
	if opts.Preview.Mode != "" || opts.Preview.Server {
		return nil, errors.New("the token says the mode and whether it enrols a server: --adopted, --converged and --server are for --dry-run without a token")
	}
	p, _, err := pki.ParseToken(opts.Token)
	if err != nil {
		return nil, &JoinError{err}
	}
	if err := pki.CheckExpiry(p, time.Now()); err != nil {
		return nil, &JoinError{err}
	}
	return p, nil
}

// joinPreflight resolves join's --port values and runs the preflight on this machine for the
// ports a client binds and the token's mode; a finding at error level refuses the join.
func joinPreflight(ctx context.Context, opts JoinOptions, p *pki.TokenPayload) (map[string]string, []api.Finding, error) {
	cat, err := catalogue.Default()
	if err != nil {
		return nil, nil, fmt.Errorf("the shipped catalogue: %w", err)
	}
	settings, err := JoinSettings(cat, opts.Ports, p.Server)
	if err != nil {
		return nil, nil, err
	}
	in := preflightInput{Act: ActJoin, Mode: fsm.Mode(p.Mode), Catalogue: cat, Settings: settings, DockerHost: opts.DockerHost,
		TakeTunnel: opts.Tunnel, Server: p.Server}
	if r, err := netip.ParsePrefix(p.Range); err == nil {
		in.Range = r.Masked()
	}
	findings := preflight(ctx, in)
	for _, f := range findings {
		if f.Level == api.LevelError {
			return nil, nil, &PreflightError{Findings: findings, Act: ActJoin}
		}
	}
	return settings, findings, nil
}

// JoinSettings resolves join's --port values to the node's settings, keyed MODULE.SETTING as the
// record keeps them. A join may set only the ports the node binds: the mesh module's, but its
// Raft port unless it joins as a server (a client runs no Raft). Genesis's syntax: --port
// gossip=17946, or mesh.gossip=17946. A server checks an enrolment's settings with it too,
// against the record's catalogue.
func JoinSettings(cat catalogue.Catalogue, ports map[string]string, server bool) (map[string]string, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	mesh := cat[catalogue.MeshModule]
	if mesh == nil {
		return nil, fmt.Errorf("the catalogue has no %s module", catalogue.MeshModule)
	}
	var allowed []string
	for _, s := range mesh.PortSettings() {
		if s != "raft" || server {
			allowed = append(allowed, s)
		}
	}
	settings := map[string]string{}
	for k, v := range ports {
		key, err := cat.SettingKey(k)
		if err != nil {
			return nil, fmt.Errorf("--port %s=%s: %w", k, v, err)
		}
		s, ok := cutModule(key, catalogue.MeshModule)
		if !ok || !slices.Contains(allowed, s) {
			return nil, fmt.Errorf("--port %s=%s: a joining node sets only the ports it binds itself: %s", k, v, strings.Join(allowed, ", "))
		}
		if _, err := catalogue.ParsePort(v); err != nil {
			return nil, fmt.Errorf("--port %s=%s: %w", k, v, err)
		}
		settings[key] = v
	}
	return settings, nil
}

// enrolAt enrols at one server's bus. The TLS handshake itself refuses a server without the
// token's CA, and a token that CA did not sign, so a forged token is never sent.
//
// sent says the request was written out whole: from then on the server may have committed the
// enrolment even when no answer comes back.
func enrolAt(ctx context.Context, addr, token, fingerprint string, body []byte) (resp *api.EnrolResponse, sent bool, err error) {
	var wrote atomic.Bool // set on the transport's goroutine
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			wrote.Store(true)
		}
	}})
	resp, err = EnrolOnce(ctx, addr, token, fingerprint, body)
	return resp, wrote.Load(), err
}

// EnrolOnce sends one enrolment body to the bus at addr, pinned to the CA of fingerprint, and
// reads the answer (the agent's bus tests enrol through it too).
func EnrolOnce(ctx context.Context, addr, token, fingerprint string, body []byte) (*api.EnrolResponse, error) {
	var ca *x509.Certificate
	var tokenErr error
	tlsCfg := pki.PinnedTLS(fingerprint, &ca)
	pinned := tlsCfg.VerifyConnection
	tlsCfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if err := pinned(cs); err != nil {
			return err
		}
		if _, err := pki.VerifyToken(token, ca, time.Now()); err != nil {
			tokenErr = err
			return err
		}
		return nil
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	defer client.CloseIdleConnections()
	bus := api.Endpoint{Client: client, Base: "https://" + addr, Limit: 16 << 20}
	resp, err := bus.Send(ctx, http.MethodPost, "/v1/enrol", bytes.NewReader(body))
	if tokenErr != nil {
		return nil, &JoinError{tokenErr}
	}
	if err != nil {
		return nil, fmt.Errorf("bus %s: %w", addr, err)
	}
	var out api.EnrolResponse
	err = bus.Read(resp, &out)
	var ae *api.AnswerError
	if errors.As(err, &ae) {
		if ae.Code < 500 {
			return nil, &JoinError{errors.New(ae.Text("bus " + addr))}
		}
		return nil, errors.New(ae.Text("bus " + addr))
	}
	if err != nil || out.Node == nil {
		return nil, fmt.Errorf("bus %s: not an enrolment answer: %v", addr, err)
	}
	return &out, nil
}

// joinedServer reads what a server's enrolment brings beyond a client's: the mesh CA with its key
// (a server enrols nodes and signs tokens) and the node's Raft port as the record settled it.
func joinedServer(resp *api.EnrolResponse) (*pki.CA, uint16, error) {
	if len(resp.CAKey) != ed25519.PrivateKeySize {
		return nil, 0, errors.New("the server sent no mesh CA key")
	}
	ca, err := pki.LoadCA([]byte(resp.CACertPEM), ed25519.PrivateKey(resp.CAKey))
	if err != nil {
		return nil, 0, fmt.Errorf("the mesh CA key it sent: %w", err)
	}
	if resp.RaftPort == 0 {
		return nil, 0, errors.New("the server sent no Raft port for it")
	}
	return ca, resp.RaftPort, nil
}
