// Command kubevirt-install-objects prints, as one JSON v1 List, the objects
// virt-operator creates when it installs KubeVirt into a namespace: its
// install strategy (pkg/virt-operator/resource/generate/install), plus the
// KubeVirt CRD that virt-operator's own manifests carry.
//
// The real control plane (localcluster.realplane.kubevirt) starts virt-api and
// virt-controller as processes rather than Deployments, so it applies the
// CRDs, ServiceAccounts, RBAC, webhook configurations and APIServices from
// this list and leaves out what only makes sense in Pods (Deployments,
// DaemonSets, Services, certificate Secrets).
//
// Usage: kubevirt-install-objects [--namespace kubevirt] [--operator-namespace NS]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/install"
	operatorutil "kubevirt.io/kubevirt/pkg/virt-operator/util"
)

func main() {
	namespace := flag.String("namespace", "kubevirt", "the namespace KubeVirt is installed into (the KubeVirt CR's)")
	operatorNamespace := flag.String("operator-namespace", "", "virt-operator's namespace (default: --namespace)")
	flag.Parse()
	if *operatorNamespace == "" {
		*operatorNamespace = *namespace
	}
	kv := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: *namespace}}
	config := operatorutil.GetTargetConfigFromKV(kv)
	strategy, err := install.GenerateCurrentInstallStrategy(config, "", *operatorNamespace)
	if err != nil {
		fmt.Fprintf(os.Stderr, "generating the install strategy: %v\n", err)
		os.Exit(1)
	}
	kvCrd, err := components.NewKubeVirtCrd()
	if err != nil {
		fmt.Fprintf(os.Stderr, "generating the KubeVirt CRD: %v\n", err)
		os.Exit(1)
	}

	var items []map[string]interface{}
	add := func(apiVersion, kind string, obj interface{}) {
		raw, err := json.Marshal(obj)
		if err != nil {
			fmt.Fprintf(os.Stderr, "marshalling a %s: %v\n", kind, err)
			os.Exit(1)
		}
		var m map[string]interface{}
		if err := json.Unmarshal(raw, &m); err != nil {
			fmt.Fprintf(os.Stderr, "unmarshalling a %s: %v\n", kind, err)
			os.Exit(1)
		}
		m["apiVersion"], m["kind"] = apiVersion, kind
		delete(m, "status")
		items = append(items, m)
	}
	add("apiextensions.k8s.io/v1", "CustomResourceDefinition", kvCrd)
	for _, o := range strategy.CRDs() {
		add("apiextensions.k8s.io/v1", "CustomResourceDefinition", o)
	}
	for _, o := range strategy.ServiceAccounts() {
		add("v1", "ServiceAccount", o)
	}
	for _, o := range strategy.ClusterRoles() {
		add("rbac.authorization.k8s.io/v1", "ClusterRole", o)
	}
	for _, o := range strategy.ClusterRoleBindings() {
		add("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", o)
	}
	for _, o := range strategy.Roles() {
		add("rbac.authorization.k8s.io/v1", "Role", o)
	}
	for _, o := range strategy.RoleBindings() {
		add("rbac.authorization.k8s.io/v1", "RoleBinding", o)
	}
	for _, o := range strategy.Services() {
		add("v1", "Service", o)
	}
	for _, o := range strategy.ValidatingWebhookConfigurations() {
		add("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", o)
	}
	for _, o := range strategy.MutatingWebhookConfigurations() {
		add("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", o)
	}
	for _, o := range strategy.APIServices() {
		add("apiregistration.k8s.io/v1", "APIService", o)
	}
	for _, o := range strategy.ValidatingAdmissionPolicies() {
		add("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", o)
	}
	for _, o := range strategy.ValidatingAdmissionPolicyBindings() {
		add("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", o)
	}
	for _, o := range strategy.Instancetypes() {
		add("instancetype.kubevirt.io/v1beta1", "VirtualMachineClusterInstancetype", o)
	}
	for _, o := range strategy.Preferences() {
		add("instancetype.kubevirt.io/v1beta1", "VirtualMachineClusterPreference", o)
	}
	out := map[string]interface{}{"apiVersion": "v1", "kind": "List", "items": items}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "writing: %v\n", err)
		os.Exit(1)
	}
}
