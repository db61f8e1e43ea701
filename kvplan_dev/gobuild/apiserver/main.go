// Command kube-apiserver is a thin wrapper around k8s.io/kubernetes/cmd/kube-apiserver/app.
//
// k8s.io/kubernetes cannot be `go install`ed directly because its go.mod replaces every k8s.io staging module
// with a local ./staging path; this wrapper's go.mod replaces them with their published v0.X.Y tags instead.
// kvplan_dev.tools writes the go.mod for the pinned version and builds it into ~/.cache/kvplan/<version>/.
package main

import (
	"os"
	_ "time/tzdata" // for timeZone support in CronJob

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
