// Command etcd is a thin wrapper around go.etcd.io/etcd/server/v3/etcdmain, built by kvplan_dev.gobuild when
// Debian's etcd-server is too old for the kube-apiserver we build.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
