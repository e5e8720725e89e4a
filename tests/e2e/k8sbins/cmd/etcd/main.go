// Command etcd is the etcd server of the version k8s.io/apiserver pins (see go.mod).
// go.etcd.io/etcd/server/v3 cannot be `go install`ed (its go.mod has replace directives) and its
// main package would be built under the name "server", hence this wrapper
// (identical to etcd-io/etcd server/main.go).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
