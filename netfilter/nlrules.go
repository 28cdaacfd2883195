package netfilter

import (
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// RuleRef is what meshd needs to know of a rule: its handle and its comment.
type RuleRef struct {
	Handle  uint64
	Comment string
}

// ListRules dumps the rules of one chain, decoding only handle and comment.
//
// google/nftables v0.3.0 cannot read back a rule holding `ct original proto-dst` (it decodes
// the kernel's one-byte direction attribute as a uint32 and fails the whole dump), and that
// is exactly the match a forwarded opening needs; so meshd reads chains itself and leaves
// expressions undecoded: its marks say what each rule is.
func (e Env) ListRules(ch *nftables.Chain) ([]RuleRef, error) {
	c, err := e.dialNetfilter()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: []byte(ch.Table.Name + "\x00")},
		{Type: unix.NFTA_RULE_CHAIN, Data: []byte(ch.Name + "\x00")},
	})
	if err != nil {
		return nil, err
	}
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE),
			Flags: netlink.Request | netlink.Dump,
		},
		Data: append([]byte{byte(ch.Table.Family), unix.NFNETLINK_V0, 0, 0}, attrs...),
	})
	if err != nil {
		return nil, fmt.Errorf("list rules of %s %s: %w", TableName(ch.Table), ch.Name, err)
	}
	var out []RuleRef
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return nil, err
		}
		var r RuleRef
		var chain string
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_RULE_HANDLE:
				r.Handle = binary.BigEndian.Uint64(ad.Bytes())
			case unix.NFTA_RULE_USERDATA:
				r.Comment, _ = userdata.GetString(ad.Bytes(), userdata.TypeComment)
			case unix.NFTA_RULE_CHAIN:
				chain = ad.String()
			}
		}
		if err := ad.Err(); err != nil {
			return nil, fmt.Errorf("decode rule of %s %s: %w", TableName(ch.Table), ch.Name, err)
		}
		if chain == ch.Name {
			out = append(out, r)
		}
	}
	return out, nil
}

// dialNetfilter opens a netfilter netlink socket in env's network namespace, with big buffers.
func (e Env) dialNetfilter() (*netlink.Conn, error) {
	cfg := &netlink.Config{}
	if e.NetNS != "" {
		f, err := os.Open(e.NetNS)
		if err != nil {
			return nil, fmt.Errorf("open network namespace %s: %w", e.NetNS, err)
		}
		defer f.Close() // the socket is made in the namespace while Dial runs; it stays there
		cfg.NetNS = int(f.Fd())
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return nil, fmt.Errorf("netlink to nftables in %s: %w", e.NSName(), err)
	}
	if err := bigBuffers(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// RuleInsert is one rule to insert at the head of a chain: its expressions and its comment.
type RuleInsert struct {
	Chain   *nftables.Chain
	Exprs   []expr.Any
	Comment string
}

// RuleDelete is one rule to delete, by handle.
type RuleDelete struct {
	Chain  *nftables.Chain
	Handle uint64
}

// batchTimeout bounds the wait for the kernel's answer to one batch: it answers in
// milliseconds, so reaching it means the answer was lost and the caller re-reads.
const batchTimeout = 5 * time.Second

// WriteRules deletes and inserts rules in one nftables transaction, the way `nft -f` does:
// no echo of each rule and one acknowledgement, for the batch's last message, instead of
// google/nftables' echo and acknowledgement for every rule (at 1000 rules those were most of
// a pass: docs/performance.md). The kernel answers after it committed or aborted the whole
// batch, and a message that failed is answered with its error even unasked, so a nil return
// means committed. After an error the caller re-reads: what landed is what the chain says.
func (e Env) WriteRules(dels []RuleDelete, adds []RuleInsert) error {
	if len(dels)+len(adds) == 0 {
		return nil
	}
	msgs := make([]netlink.Message, 0, len(dels)+len(adds)+2)
	add := func(typ uint16, flags netlink.HeaderFlags, fam byte, resID uint16, attrs []byte) {
		msgs = append(msgs, netlink.Message{
			Header: netlink.Header{Type: netlink.HeaderType(typ), Flags: netlink.Request | flags},
			Data:   append([]byte{fam, unix.NFNETLINK_V0, byte(resID >> 8), byte(resID)}, attrs...),
		})
	}
	add(unix.NFNL_MSG_BATCH_BEGIN, 0, 0, unix.NFNL_SUBSYS_NFTABLES, nil)
	for _, d := range dels {
		attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
			{Type: unix.NFTA_RULE_TABLE, Data: []byte(d.Chain.Table.Name + "\x00")},
			{Type: unix.NFTA_RULE_CHAIN, Data: []byte(d.Chain.Name + "\x00")},
			{Type: unix.NFTA_RULE_HANDLE, Data: binary.BigEndian.AppendUint64(nil, d.Handle)},
		})
		if err != nil {
			return err
		}
		add(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_DELRULE, 0, byte(d.Chain.Table.Family), 0, attrs)
	}
	for _, a := range adds {
		fam := byte(a.Chain.Table.Family)
		list := make([]netlink.Attribute, len(a.Exprs))
		for i, x := range a.Exprs {
			b, err := expr.Marshal(fam, x)
			if err != nil {
				return fmt.Errorf("rule %q for %s %s: %w", a.Comment, TableName(a.Chain.Table), a.Chain.Name, err)
			}
			list[i] = netlink.Attribute{Type: unix.NLA_F_NESTED | unix.NFTA_LIST_ELEM, Data: b}
		}
		exprs, err := netlink.MarshalAttributes(list)
		if err != nil {
			return err
		}
		attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
			{Type: unix.NFTA_RULE_TABLE, Data: []byte(a.Chain.Table.Name + "\x00")},
			{Type: unix.NFTA_RULE_CHAIN, Data: []byte(a.Chain.Name + "\x00")},
			{Type: unix.NLA_F_NESTED | unix.NFTA_RULE_EXPRESSIONS, Data: exprs},
			{Type: unix.NFTA_RULE_USERDATA, Data: commentData(a.Comment)},
		})
		if err != nil {
			return err
		}
		// Create, without Append and with no position: at the head of the chain.
		add(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWRULE, netlink.Create, fam, 0, attrs)
	}
	msgs[len(msgs)-1].Header.Flags |= netlink.Acknowledge
	add(unix.NFNL_MSG_BATCH_END, 0, 0, unix.NFNL_SUBSYS_NFTABLES, nil)

	c, err := e.dialNetfilter()
	if err != nil {
		return err
	}
	defer c.Close()
	what := fmt.Sprintf("nftables batch of %d deletes and %d inserts in %s", len(dels), len(adds), e.NSName())
	sent, err := c.SendMessages(msgs)
	if err != nil {
		return fmt.Errorf("send %s: %w", what, err)
	}
	if err := c.SetReadDeadline(time.Now().Add(batchTimeout)); err != nil {
		return err
	}
	last := sent[len(sent)-2].Header.Sequence
	for {
		// An error message comes back as the error (an *OpError naming the errno and the
		// kernel's own words, when it gave some); the acknowledgement of the last message
		// means the transaction committed.
		replies, err := c.Receive()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for _, r := range replies {
			if r.Header.Type == netlink.Error && r.Header.Sequence == last {
				return nil
			}
		}
	}
}

// RulesetGeneration asks the kernel for the nftables ruleset's generation id, which it bumps
// with every committed transaction in env's network namespace.
func (e Env) RulesetGeneration() (uint32, error) {
	c, err := e.dialNetfilter()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN),
			Flags: netlink.Request,
		},
		Data: []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	})
	if err != nil {
		return 0, fmt.Errorf("nftables generation in %s: %w", e.NSName(), err)
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return 0, err
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				return ad.Uint32(), nil
			}
		}
	}
	return 0, fmt.Errorf("nftables generation in %s: no id in the answer", e.NSName())
}
