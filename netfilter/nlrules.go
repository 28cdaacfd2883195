package netfilter

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ruleRef is what meshd needs to know of a rule: its handle and its comment.
type ruleRef struct {
	Handle  uint64
	Comment string
}

// listRules dumps the rules of one chain, decoding only handle and comment.
//
// google/nftables v0.3.0 cannot read back a rule holding `ct original proto-dst` (it decodes
// the kernel's one-byte direction attribute as a uint32 and fails the whole dump), and that
// is exactly the match a forwarded opening needs; so meshd reads chains itself and leaves
// expressions undecoded: its marks say what each rule is.
func (e Env) listRules(ch *nftables.Chain) ([]ruleRef, error) {
	cfg := &netlink.Config{}
	if e.NetNS != "" {
		f, err := os.Open(e.NetNS)
		if err != nil {
			return nil, fmt.Errorf("open network namespace %s: %w", e.NetNS, err)
		}
		defer f.Close()
		cfg.NetNS = int(f.Fd())
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return nil, fmt.Errorf("netlink to nftables in %s: %w", e.nsName(), err)
	}
	defer c.Close()
	if err := bigBuffers(c); err != nil {
		return nil, err
	}
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
		return nil, fmt.Errorf("list rules of %s %s: %w", tableName(ch.Table), ch.Name, err)
	}
	var out []ruleRef
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return nil, err
		}
		var r ruleRef
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
			return nil, fmt.Errorf("decode rule of %s %s: %w", tableName(ch.Table), ch.Name, err)
		}
		if chain == ch.Name {
			out = append(out, r)
		}
	}
	return out, nil
}
