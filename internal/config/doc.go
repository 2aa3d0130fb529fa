// Package config turns gatehouse.yaml, GATEHOUSE_* environment variables
// and command-line flags into one validated [Config] (DESIGN §11, STYLE
// §3.3). It is the only package that reads the configuration file; every
// other part receives its own plain options, built from Config by
// internal/gatehouse.
//
// Precedence, lowest first: built-in defaults ([Default]), the YAML file
// named by -config (or GATEHOUSE_CONFIG), GATEHOUSE_* environment
// variables, flags. Every key has a flag and a variable; the variable is
// GATEHOUSE_ followed by the flag name upper-cased with '-' turned into '_'
// (-http-mode is GATEHOUSE_HTTP_MODE). docs/config.md lists them all.
//
//	cfg, err := config.Load(os.Args[2:], os.Environ())
//	if err != nil { // one line: "config: http.mode: must be one of ..."
//		return err
//	}
package config
