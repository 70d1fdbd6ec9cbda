"""Operations plumbing shared by every service: the admin HTTP app (/healthz, /readyz,
/metrics) and the settings rules ("refuse unsafe settings unless APEXMESH_DEV=1")."""
