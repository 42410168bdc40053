-- SPEC §13: plans belong to projects and only the operator sets them (PATCH /admin/v1/projects/{id}).
-- api_keys.plan stays as a copy of its project's plan, kept equal by every write, so the hot
-- path's key lookup needs no join.
--
-- Upgrade: each existing project keeps the plan its oldest active owner key ran under (the plan
-- it has been using), so no tenant is cut off by the upgrade; the operator reviews the list
-- (SELECT id, name, plan FROM projects) and sets plans from now on. Every key then takes its
-- project's plan.
ALTER TABLE projects ADD COLUMN plan TEXT NOT NULL DEFAULT 'trial';

UPDATE projects SET plan = COALESCE(
  (SELECT k.plan FROM api_keys k
    WHERE k.project_id = projects.id AND k.type = 'owner' AND k.revoked_at IS NULL
    ORDER BY k.created_at, k.id LIMIT 1),
  'trial');

UPDATE api_keys SET plan = (SELECT p.plan FROM projects p WHERE p.id = api_keys.project_id);
