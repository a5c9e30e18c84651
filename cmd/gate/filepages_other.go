//go:build !linux

package main

// dropExecutablePages does nothing outside Linux (see filepages_linux.go).
func dropExecutablePages() {}
