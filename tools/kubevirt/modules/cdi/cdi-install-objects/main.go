// Command cdi-install-objects prints, as one JSON v1 List, the objects
// cdi-operator creates when it installs CDI into a namespace: the cluster-wide
// resources (CRDs, ClusterRoles and their bindings, the webhook configurations
// and APIService of cdi-apiserver) and the namespaced ones (ServiceAccounts,
// Roles, RoleBindings, Deployments, Services) of pkg/operator/resources.
//
// The real control plane (localcluster.realplane.cdi) runs cdi-apiserver as a
// process rather than a Deployment, so it applies the CRDs, ServiceAccounts,
// RBAC and webhook configurations from this list and leaves out what only
// makes sense in Pods (Deployments, Services).
//
// Usage: cdi-install-objects [--namespace cdi]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"kubevirt.io/containerized-data-importer/pkg/operator/resources/cluster"
	"kubevirt.io/containerized-data-importer/pkg/operator/resources/namespaced"
)

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	os.Exit(1)
}

func main() {
	namespace := flag.String("namespace", "cdi", "the namespace CDI is installed into")
	flag.Parse()

	var objects []client.Object
	for _, generate := range []func(*cluster.FactoryArgs) ([]client.Object, error){
		cluster.CreateAllStaticResources, cluster.CreateAllDynamicResources,
	} {
		found, err := generate(&cluster.FactoryArgs{Namespace: *namespace})
		if err != nil {
			fail("generating the cluster resources", err)
		}
		objects = append(objects, found...)
	}
	// The images and versions name what the Deployments would run; nothing here runs them.
	found, err := namespaced.CreateAllResources(&namespaced.FactoryArgs{
		OperatorVersion: "unused", ControllerImage: "unused", DeployClusterResources: "true",
		ImporterImage: "unused", ClonerImage: "unused", OvirtPopulatorImage: "unused", APIServerImage: "unused",
		UploadProxyImage: "unused", UploadServerImage: "unused", Verbosity: "1", PullPolicy: "IfNotPresent",
		Namespace: *namespace,
	})
	if err != nil {
		fail("generating the namespaced resources", err)
	}
	objects = append(objects, found...)

	items := make([]map[string]interface{}, 0, len(objects))
	for _, o := range objects {
		raw, err := json.Marshal(o)
		if err != nil {
			fail("marshalling "+o.GetName(), err)
		}
		var m map[string]interface{}
		if err := json.Unmarshal(raw, &m); err != nil {
			fail("unmarshalling "+o.GetName(), err)
		}
		delete(m, "status")
		items = append(items, m)
	}
	out, err := json.Marshal(map[string]interface{}{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		fail("marshalling the list", err)
	}
	os.Stdout.Write(append(out, '\n'))
}
