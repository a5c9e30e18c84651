// Command badabi is a test plugin whose ABI version export says 99.
package main

//go:wasmexport asyncgate_abi_version
func abi() int32 { return 99 }

//go:wasmexport asyncgate_alloc
func alloc(n int32) uint32 { return 0 }

//go:wasmexport decide
func decide(p, n, dp, dn uint32) uint64 { return 0 }

func main() {}
