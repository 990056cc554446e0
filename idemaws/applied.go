package idemaws

// appliedAnswer is an API's error that says the operation's token was
// applied before: its code, the field of the error that carries the ID
// of what it made, and the field that must hold the operation's token for
// the answer to be about it.
type appliedAnswer struct {
	code       string
	idField    string // "" when the answer carries no ID
	tokenField string // "" when the code alone says it
}

// appliedAnswers are the "already exists" answers of the operations whose
// API answers a token it applied before with an error instead of its first
// answer, by "ServiceID.Operation". Each quotes its API reference (the
// error's documentation in the AWS models). An operation's token is sent
// with one input only (its fingerprint), so such an answer to it is about
// its own request.
var appliedAnswers = map[string]appliedAnswer{
	// "Returned if the file system you are trying to create already
	// exists, with the creation token you provided."
	"EFS.CreateFileSystem": {code: "FileSystemAlreadyExists", idField: "FileSystemId"},
	// "Returned if the access point that you are trying to create already
	// exists, with the creation token you provided in the request."
	"EFS.CreateAccessPoint": {code: "AccessPointAlreadyExists", idField: "AccessPointId"},
	// "Amazon Route 53 returns this error when a hosted zone has already
	// been created with the specified CallerReference." No ID: the hosted
	// zone whose CallerReference is the token.
	"Route 53.CreateHostedZone": {code: "HostedZoneAlreadyExists"},
	// "A delegation set with the same owner and caller reference
	// combination has already been created."
	"Route 53.CreateReusableDelegationSet": {code: "DelegationSetAlreadyCreated"},
	// Route 53 returns it for "the same value for CallerReference as an
	// existing health check, and one or more values that differ", or "as a
	// health check that you created and later deleted": for an operation's
	// own token, its own request made the health check.
	"Route 53.CreateHealthCheck": {code: "HealthCheckAlreadyExists"},
	// "The caller reference you attempted to create the distribution with
	// is associated with another distribution."
	"CloudFront.CreateDistribution":          {code: "DistributionAlreadyExists"},
	"CloudFront.CopyDistribution":            {code: "DistributionAlreadyExists"},
	"CloudFront.CreateStreamingDistribution": {code: "StreamingDistributionAlreadyExists"},
	// "The namespace that you're trying to create already exists", with
	// the CreatorRequestId it was created with.
	"ServiceDiscovery.CreateHttpNamespace":       {code: "NamespaceAlreadyExists", idField: "NamespaceId", tokenField: "CreatorRequestId"},
	"ServiceDiscovery.CreatePrivateDnsNamespace": {code: "NamespaceAlreadyExists", idField: "NamespaceId", tokenField: "CreatorRequestId"},
	"ServiceDiscovery.CreatePublicDnsNamespace":  {code: "NamespaceAlreadyExists", idField: "NamespaceId", tokenField: "CreatorRequestId"},
	"ServiceDiscovery.CreateService":             {code: "ServiceAlreadyExists", idField: "ServiceId", tokenField: "CreatorRequestId"},
	// "The required resource already exists", with its CreatorRequestId
	// and Arn.
	"Backup.CreateBackupPlan":              {code: "AlreadyExistsException", idField: "Arn", tokenField: "CreatorRequestId"},
	"Backup.CreateBackupSelection":         {code: "AlreadyExistsException", idField: "Arn", tokenField: "CreatorRequestId"},
	"Backup.CreateBackupVault":             {code: "AlreadyExistsException", idField: "Arn", tokenField: "CreatorRequestId"},
	"Backup.CreateRestoreTestingPlan":      {code: "AlreadyExistsException", idField: "Arn", tokenField: "CreatorRequestId"},
	"Backup.CreateRestoreTestingSelection": {code: "AlreadyExistsException", idField: "Arn", tokenField: "CreatorRequestId"},
}

// appliedBefore reports whether err, the answer of operation key sent
// under token, is an "already exists" answer of appliedAnswers, and the ID
// it carries.
func appliedBefore(key, token string, err error) (id string, ok bool) {
	a, ok := appliedAnswers[key]
	if !ok || apiCode(err) != a.code || a.tokenField != "" && apiField(err, a.tokenField) != token {
		return "", false
	}
	return apiField(err, a.idField), true
}
