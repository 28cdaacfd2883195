package netfilter

// Unexported names the lab tests (package netfilter_test) read.
const (
	NftConf = nftConf
	UFWDir  = ufwDir
)

var RestoreXTFamily = restoreXTFamily
