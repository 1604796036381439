// Command etcd is the upstream etcd server entry point. The root module
// go.etcd.io/etcd/v3 (which holds upstream's main.go) pins its sub-modules to
// relative paths, so this module requires the published server module instead
// and calls the same entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
