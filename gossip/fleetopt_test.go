package gossip

// fleetServers makes the named members the servers (Config.Server): BenchmarkFleetAtRest's one
// line that differs from the code before issue 37, where every member carried every report.
func fleetServers(servers map[string]bool) gsOpt {
	return func(c *Config) { c.Server = func(n string) bool { return servers[n] } }
}
