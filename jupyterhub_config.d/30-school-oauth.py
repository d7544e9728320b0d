# Log in with the school's OAuth2 / OpenID Connect server (oauthenticator's
# GenericOAuthenticator). Not used by the local demo, which logs in anyone on
# loopback. Replace the URLs with your identity provider's; read the client
# secret from the environment (z2jh: from a Kubernetes Secret).
import os

c.JupyterHub.authenticator_class = "generic-oauth"
c.GenericOAuthenticator.client_id = os.environ.get("OAUTH_CLIENT_ID", "jupyterhub")
c.GenericOAuthenticator.client_secret = os.environ.get("OAUTH_CLIENT_SECRET", "")
c.GenericOAuthenticator.oauth_callback_url = "https://hub.example.edu/hub/oauth_callback"
c.GenericOAuthenticator.authorize_url = "https://sso.example.edu/oauth2/authorize"
c.GenericOAuthenticator.token_url = "https://sso.example.edu/oauth2/token"
c.GenericOAuthenticator.userdata_url = "https://sso.example.edu/oauth2/userinfo"
c.GenericOAuthenticator.scope = ["openid", "profile", "email", "groups"]
c.GenericOAuthenticator.username_claim = "preferred_username"
# Groups from the identity provider become JupyterHub groups, which
# profiles' allowed_groups (and later quotas) use.
c.GenericOAuthenticator.manage_groups = True
c.GenericOAuthenticator.auth_state_groups_key = "oauth_user.groups"
c.GenericOAuthenticator.allow_all = True
