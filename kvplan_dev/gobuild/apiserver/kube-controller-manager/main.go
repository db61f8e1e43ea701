// Command kube-controller-manager is k8s.io/kubernetes/cmd/kube-controller-manager, built inside the
// kube-apiserver wrapper module (../go.mod) so it links the same published staging modules. The twin
// (kvplan_dev.twin) runs it for Deployments -> ReplicaSets -> Pods and the garbage collector.
package main

import (
	"os"
	_ "time/tzdata" // for CronJob time zone support, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	command := app.NewControllerManagerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
