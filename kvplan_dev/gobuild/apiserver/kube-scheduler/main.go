// Command kube-scheduler is k8s.io/kubernetes/cmd/kube-scheduler, built inside the kube-apiserver wrapper
// module (../go.mod) so it links the same published staging modules. The twin (kvplan_dev.twin) runs it to
// place Pods on its GPU nodes by nvidia.com/gpu and node selectors.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	command := app.NewSchedulerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
