// Command seed-design is the comparison subject of `cargo xtask bench --operator=seed-design`:
// the design of the tutorial this project implements, built with controller-runtime and run
// against the same DatabaseCluster objects, so that both operators are measured with the same
// control plane, workload and audit log.
//
// It does what that design does and nothing more: a finalizer added with an Update, then on
// every pass CreateOrUpdate of the StatefulSet, a headless and a client Service and (with
// backups) the CronJob, a status Update with the ready count, phase and a Ready condition, and
// RequeueAfter the resync period; 5 workers by default. The objects have the shape our operator
// renders (same images, requests, volume claim), so kwok schedules and "runs" the same pods.
// What it lacks (no role labels, no disruption budget, no config, no database connections) is
// the point of the comparison, not an oversight.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

const finalizer = "database.example.com/finalizer"

var gvk = schema.GroupVersionKind{Group: "database.example.com", Version: "v1alpha1", Kind: "DatabaseCluster"}

// spec is the part of a DatabaseCluster's spec this design reads.
type spec struct {
	Engine            string `json:"engine"`
	Version           string `json:"version"`
	Replicas          int32  `json:"replicas"`
	PasswordSecretRef struct {
		Name string `json:"name"`
		Key  string `json:"key"`
	} `json:"passwordSecretRef"`
	Storage struct {
		Size             string `json:"size"`
		StorageClassName string `json:"storageClassName"`
	} `json:"storage"`
	Resources *corev1.ResourceRequirements `json:"resources"`
	Backup    *struct {
		Schedule string `json:"schedule"`
		S3Bucket string `json:"s3Bucket"`
	} `json:"backup"`
}

type reconciler struct {
	client.Client
	scheme  *runtime.Scheme
	requeue time.Duration
}

func newCluster() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := newCluster()
	if err := r.Get(ctx, req.NamespacedName, db); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get DatabaseCluster: %w", err)
	}
	if !db.GetDeletionTimestamp().IsZero() {
		if controllerutil.RemoveFinalizer(db, finalizer) {
			return ctrl.Result{}, r.Update(ctx, db)
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(db, finalizer) {
		if err := r.Update(ctx, db); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
		return ctrl.Result{Requeue: true}, nil
	}
	var s spec
	raw, err := json.Marshal(db.Object["spec"])
	if err == nil {
		err = json.Unmarshal(raw, &s)
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("read spec: %w", err)
	}
	if err := r.statefulSet(ctx, db, &s); err != nil {
		return ctrl.Result{}, fmt.Errorf("reconcile StatefulSet: %w", err)
	}
	if err := r.services(ctx, db, &s); err != nil {
		return ctrl.Result{}, fmt.Errorf("reconcile Services: %w", err)
	}
	if s.Backup != nil {
		if err := r.cronJob(ctx, db, &s); err != nil {
			return ctrl.Result{}, fmt.Errorf("reconcile backup CronJob: %w", err)
		}
	}
	if err := r.updateStatus(ctx, db, &s); err != nil {
		return ctrl.Result{}, fmt.Errorf("update status: %w", err)
	}
	return ctrl.Result{RequeueAfter: r.requeue}, nil
}

func labels(db *unstructured.Unstructured) map[string]string {
	return map[string]string{
		"app":                          db.GetName(),
		"role":                         "database",
		"database.example.com/cluster": db.GetName(),
	}
}

func image(s *spec) string {
	if s.Engine == "postgresql" {
		return "docker.io/library/postgres:" + s.Version
	}
	return "docker.io/library/" + s.Engine + ":" + s.Version
}

func port(s *spec) int32 {
	if s.Engine == "postgresql" {
		return 5432
	}
	return 3306
}

func resources(s *spec) corev1.ResourceRequirements {
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("500m"),
			corev1.ResourceMemory: resource.MustParse("1Gi"),
		},
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	if s.Resources != nil {
		for k, v := range s.Resources.Requests {
			res.Requests[k] = v
		}
		for k, v := range s.Resources.Limits {
			res.Limits[k] = v
		}
	}
	return res
}

func (r *reconciler) statefulSet(ctx context.Context, db *unstructured.Unstructured, s *spec) error {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: db.GetName(), Namespace: db.GetNamespace()}}
	passwordEnv := "MYSQL_ROOT_PASSWORD"
	if s.Engine == "postgresql" {
		passwordEnv = "POSTGRES_PASSWORD"
	}
	replicas := s.Replicas
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, sts, func() error {
		if err := controllerutil.SetControllerReference(db, sts, r.scheme); err != nil {
			return err
		}
		sts.Labels = labels(db)
		sts.Spec.Replicas = &replicas
		sts.Spec.Template = corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels(db)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name:      s.Engine,
				Image:     image(s),
				Ports:     []corev1.ContainerPort{{Name: "db", ContainerPort: port(s)}},
				Resources: resources(s),
				Env: []corev1.EnvVar{{Name: passwordEnv, ValueFrom: &corev1.EnvVarSource{
					SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: s.PasswordSecretRef.Name},
						Key:                  s.PasswordSecretRef.Key,
					},
				}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/data"}},
			}}},
		}
		if sts.CreationTimestamp.IsZero() {
			size, err := resource.ParseQuantity(s.Storage.Size)
			if err != nil {
				return fmt.Errorf("spec.storage.size: %w", err)
			}
			class := s.Storage.StorageClassName
			sts.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels(db)}
			sts.Spec.ServiceName = db.GetName() + "-headless"
			sts.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: &class,
					Resources: corev1.VolumeResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceStorage: size},
					},
				},
			}}
		}
		return nil
	})
	return err
}

func (r *reconciler) services(ctx context.Context, db *unstructured.Unstructured, s *spec) error {
	for _, headless := range []bool{true, false} {
		name := db.GetName()
		if headless {
			name += "-headless"
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: db.GetNamespace()}}
		_, err := controllerutil.CreateOrUpdate(ctx, r.Client, svc, func() error {
			if err := controllerutil.SetControllerReference(db, svc, r.scheme); err != nil {
				return err
			}
			svc.Labels = labels(db)
			svc.Spec.Selector = labels(db)
			svc.Spec.Ports = []corev1.ServicePort{{Name: "db", Port: port(s), TargetPort: intstr.FromInt32(port(s))}}
			if headless && svc.CreationTimestamp.IsZero() {
				svc.Spec.ClusterIP = corev1.ClusterIPNone
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *reconciler) cronJob(ctx context.Context, db *unstructured.Unstructured, s *spec) error {
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: db.GetName() + "-backup", Namespace: db.GetNamespace()}}
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, cj, func() error {
		if err := controllerutil.SetControllerReference(db, cj, r.scheme); err != nil {
			return err
		}
		cj.Labels = labels(db)
		cj.Spec.Schedule = s.Backup.Schedule
		cj.Spec.ConcurrencyPolicy = batchv1.ForbidConcurrent
		cj.Spec.JobTemplate.Spec.Template.Spec = corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyOnFailure,
			Containers: []corev1.Container{{
				Name:    "backup",
				Image:   image(s),
				Command: []string{"/bin/sh", "-c", "echo backup of " + db.GetName() + " to s3://" + s.Backup.S3Bucket},
			}},
		}
		return nil
	})
	return err
}

func (r *reconciler) updateStatus(ctx context.Context, db *unstructured.Unstructured, s *spec) error {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(db.GetNamespace()),
		client.MatchingLabels{"app": db.GetName(), "role": "database"}); err != nil {
		return err
	}
	ready := int64(0)
	for _, pod := range pods.Items {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	status, _ := db.Object["status"].(map[string]any)
	if status == nil {
		status = map[string]any{}
	}
	var conditions []metav1.Condition
	if raw, err := json.Marshal(status["conditions"]); err == nil {
		_ = json.Unmarshal(raw, &conditions)
	}
	phase, cond := "Running", metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue,
		Reason: "AllReplicasReady", Message: "All replicas are ready"}
	switch {
	case ready == 0:
		phase, cond = "Initializing", metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse,
			Reason: "NoReadyReplicas", Message: "No replicas are ready yet"}
	case ready < int64(s.Replicas):
		phase, cond = "Degraded", metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse,
			Reason: "InsufficientReplicas", Message: fmt.Sprintf("%d/%d replicas ready", ready, s.Replicas)}
	}
	cond.ObservedGeneration = db.GetGeneration()
	cond.LastTransitionTime = metav1.Now()
	meta.SetStatusCondition(&conditions, cond)
	status["readyReplicas"] = ready
	status["phase"] = phase
	status["observedGeneration"] = db.GetGeneration()
	// The benchmark's "settled" check reads currentVersion; this design knows no more than
	// that the spec's version was rendered once every member is ready.
	if phase == "Running" {
		status["currentVersion"] = s.Version
	}
	var generic []any
	if raw, err := json.Marshal(conditions); err == nil {
		_ = json.Unmarshal(raw, &generic)
	}
	status["conditions"] = generic
	db.Object["status"] = status
	return r.Status().Update(ctx, db)
}

func main() {
	concurrency := flag.Int("concurrency", 5, "MaxConcurrentReconciles")
	resync := flag.Duration("resync", 30*time.Second, "RequeueAfter of every pass")
	adminAddr := flag.String("admin-addr", "127.0.0.1:0", "address of /metrics and /readyz")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseDevMode(false)))
	log := ctrl.Log.WithName("seed-design")

	// As the design's main.go: --kubeconfig (registered by controller-runtime), and no
	// client-side rate limiter (QPS -1), as for our operator.
	cfg := ctrl.GetConfigOrDie()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// The design reads its typed DatabaseCluster from the informer cache; this build reads
		// it as unstructured, which controller-runtime reads live unless told otherwise.
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		log.Error(err, "manager")
		os.Exit(1)
	}
	r := &reconciler{Client: mgr.GetClient(), scheme: mgr.GetScheme(), requeue: *resync}
	err = ctrl.NewControllerManagedBy(mgr).
		For(newCluster()).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&batchv1.CronJob{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: *concurrency}).
		Complete(r)
	if err != nil {
		log.Error(err, "controller")
		os.Exit(1)
	}

	listener, err := net.Listen("tcp", *adminAddr)
	if err != nil {
		log.Error(err, "admin listener")
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 100*time.Millisecond)
		defer cancel()
		if mgr.GetCache().WaitForCacheSync(ctx) {
			_, _ = w.Write([]byte("ok"))
			return
		}
		http.Error(w, "caches not synced", http.StatusServiceUnavailable)
	})
	go func() { _ = http.Serve(listener, mux) }()
	// The line the benchmark looks for (the shape of our operator's JSON log).
	line, _ := json.Marshal(map[string]string{
		"message":   "admin server listening",
		"addr":      listener.Addr().String(),
		"endpoints": "/metrics /readyz",
	})
	fmt.Fprintln(os.Stderr, string(line))

	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
