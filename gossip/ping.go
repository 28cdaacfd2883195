package gossip

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"time"
)

// pingWait is how long Ping waits for an answer to each of its tries.
const pingWait = time.Second

// Ping tells whether a member answers on udp host:port, from an ephemeral port, so only the
// member's port is tested and not the sender's. It sends up to three memberlist pings (message
// type 0, msgpack {SeqNo, Node: ""}) encrypted as memberlist encrypts (AES-GCM, encryption version
// 1) with key, and takes any answer as reached: a member answers only a ping encrypted with a key
// on its ring, so a wrong key reads as unreachable. `meshd check reach` uses it for gossip's udp.
func Ping(ctx context.Context, host string, port uint16, key []byte) error {
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return err
	}
	c, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 2048)
	for try := 0; try < 3 && ctx.Err() == nil; try++ {
		pkt, err := pingPacket(key, uint32(time.Now().UnixNano()))
		if err != nil {
			return err
		}
		if _, err := c.Write(pkt); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(pingWait))
		if n, err := c.Read(buf); err == nil && n > 0 {
			return nil
		}
	}
	return fmt.Errorf("no answer to a gossip ping on udp %s (3 tries)", addr)
}

// pingPacket is one encrypted memberlist ping with sequence number seq.
func pingPacket(key []byte, seq uint32) ([]byte, error) {
	// msgpack: fixmap(2) {"SeqNo": uint32, "Node": ""}
	msg := []byte{0 /* pingMsg */, 0x82, 0xa5, 'S', 'e', 'q', 'N', 'o', 0xce}
	msg = binary.BigEndian.AppendUint32(msg, seq)
	msg = append(msg, 0xa4, 'N', 'o', 'd', 'e', 0xa0)
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := append([]byte{1 /* encryption version */}, nonce...)
	return gcm.Seal(out, nonce, msg, nil), nil
}
